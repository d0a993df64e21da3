// One file range moved between memory and a file through Linux AIO (libaio).
//
// Torch-free on purpose: the engine sees raw pointers, byte ranges and file
// descriptors; the bindings in aio/async_io.cpp own tensors, paths and Python errors.
#pragma once

#include <fcntl.h>
#include <libaio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace aio {

// O_DIRECT wants buffers, offsets and lengths aligned to the device's logical block
// size; 4096 covers both 512-byte and 4K-sector devices.
constexpr std::int64_t kDirectAlignment = 4096;

enum class Op { kRead, kWrite };

inline const char* op_name(Op op) { return op == Op::kRead ? "read" : "write"; }

inline std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// What went wrong in one range: an errno and where. err == 0 means success.
struct IOError {
    int err = 0;
    std::string detail;
    explicit operator bool() const { return err != 0; }
};

struct Range {
    std::int64_t begin;
    std::int64_t end;
};

// Split [0, nbytes) into at most `parts` ranges whose boundaries fall on multiples of
// `block`, so only the very last request of a file can be a partial block (which
// keeps every direct-I/O request but that one aligned).
inline std::vector<Range> split_range(std::int64_t nbytes, std::int64_t block, int parts) {
    std::vector<Range> out;
    if (nbytes <= 0) return out;
    const std::int64_t blocks = (nbytes + block - 1) / block;
    const std::int64_t per_part = (blocks + parts - 1) / parts;
    for (std::int64_t first = 0; first < blocks; first += per_part) {
        const std::int64_t begin = first * block;
        const std::int64_t end = std::min(nbytes, (first + per_part) * block);
        out.push_back({begin, end});
    }
    return out;
}

// The descriptors of one open file. direct_fd is -1 unless direct I/O is on; the
// buffered descriptor serves what O_DIRECT cannot (an unaligned tail, short results).
struct Files {
    int buffered_fd = -1;
    int direct_fd = -1;
};

// pread/pwrite until `len` bytes are done; the kernel may move fewer bytes per call.
inline IOError sync_transfer(Op op, int fd, char* buf, std::int64_t len, std::int64_t offset) {
    while (len > 0) {
        const ssize_t n = op == Op::kWrite ? ::pwrite(fd, buf, static_cast<size_t>(len), offset)
                                           : ::pread(fd, buf, static_cast<size_t>(len), offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return {errno, std::string(op_name(op)) + " at byte " + std::to_string(offset)};
        }
        if (n == 0) {
            // Only a read can see 0: the file got shorter after its size was checked.
            return {EIO, "unexpected end of file at byte " + std::to_string(offset)};
        }
        buf += n;
        offset += n;
        len -= n;
    }
    return {};
}

// One worker's AIO context: `queue_depth` requests of up to `block_size` bytes in
// flight. Used by one thread at a time.
class Context {
   public:
    Context(int queue_depth, std::int64_t block_size, bool direct)
        : queue_depth_(queue_depth), block_size_(block_size), direct_(direct) {
        const int rc = io_setup(queue_depth, &ctx_);
        if (rc < 0) {
            // EAGAIN here means the system-wide limit /proc/sys/fs/aio-max-nr is reached.
            throw std::system_error(-rc, std::generic_category(),
                                    "io_setup(" + std::to_string(queue_depth) + ") failed");
        }
    }
    ~Context() {
        io_destroy(ctx_);
        for (char* b : bounce_) std::free(b);
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    // Move bytes [r.begin, r.end) of the file to/from `base + r.begin`. `base` is the
    // address of the file's byte 0 in memory. On error no new requests are issued,
    // the ones in flight are drained, and the first error is returned.
    IOError transfer(Op op, const Files& files, char* base, Range r) {
        // O_DIRECT needs an aligned buffer; offsets are multiples of block_size (itself
        // aligned), so the whole range is aligned exactly when `base` is.
        const bool bounce = direct_ && reinterpret_cast<std::uintptr_t>(base) % kDirectAlignment != 0;
        if (bounce) ensure_bounce_buffers();

        std::vector<Slot> slots(static_cast<size_t>(queue_depth_));
        std::vector<int> free_slots;
        for (int i = queue_depth_ - 1; i >= 0; --i) free_slots.push_back(i);
        std::vector<iocb*> pending;  // prepared, not yet accepted by io_submit
        std::vector<io_event> events(static_cast<size_t>(queue_depth_));
        std::int64_t next = r.begin;
        int in_flight = 0;
        int idle_retries = 0;
        IOError error;

        while (true) {
            while (!error && next < r.end && !free_slots.empty()) {
                const std::int64_t len = std::min(block_size_, r.end - next);
                if (direct_ && len % kDirectAlignment != 0) {
                    // The file's unaligned tail: O_DIRECT cannot move it, a plain call can.
                    error = sync_transfer(op, files.buffered_fd, base + next, len, next);
                    next += len;
                    continue;
                }
                const int s = free_slots.back();
                free_slots.pop_back();
                Slot& slot = slots[static_cast<size_t>(s)];
                slot.user = base + next;
                slot.io_buf = bounce ? bounce_[static_cast<size_t>(s)] : slot.user;
                slot.len = len;
                slot.offset = next;
                if (bounce && op == Op::kWrite) std::memcpy(slot.io_buf, slot.user, static_cast<size_t>(len));
                const int fd = direct_ ? files.direct_fd : files.buffered_fd;
                if (op == Op::kWrite) {
                    io_prep_pwrite(&slot.cb, fd, slot.io_buf, static_cast<size_t>(len), next);
                } else {
                    io_prep_pread(&slot.cb, fd, slot.io_buf, static_cast<size_t>(len), next);
                }
                slot.cb.data = &slot;  // io_prep_* clears the iocb, so set this after it
                pending.push_back(&slot.cb);
                next += len;
            }

            if (!pending.empty()) {
                const int rc = io_submit(ctx_, static_cast<long>(pending.size()), pending.data());
                if (rc > 0) {
                    idle_retries = 0;
                    pending.erase(pending.begin(), pending.begin() + rc);
                    in_flight += rc;
                } else if (rc == -EINVAL && !direct_) {
                    // Files without AIO support (pipes, most character devices) refuse
                    // every request: move these bytes with plain calls instead.
                    for (iocb* cb : pending) {
                        const Slot& slot = slots[static_cast<size_t>(slot_index(slots, cb))];
                        IOError e = sync_transfer(op, files.buffered_fd, slot.user, slot.len, slot.offset);
                        if (e && !error) error = std::move(e);
                        free_slots.push_back(slot_index(slots, cb));
                    }
                    pending.clear();
                } else if (rc == -EAGAIN || rc == -EINTR) {
                    // The kernel is out of request slots: reap below, or retry shortly.
                    if (in_flight == 0) std::this_thread::yield();
                } else {
                    if (!error) error = {-rc, "io_submit"};
                    for (iocb* cb : pending) free_slots.push_back(slot_index(slots, cb));
                    pending.clear();
                }
                if (rc == -EAGAIN && in_flight == 0 && ++idle_retries > kMaxIdleRetries && !error) {
                    error = {EAGAIN, "io_submit kept refusing requests with none in flight"};
                    for (iocb* cb : pending) free_slots.push_back(slot_index(slots, cb));
                    pending.clear();
                }
            }

            if (in_flight == 0) {
                if (pending.empty() && (error || next >= r.end)) break;
                continue;
            }

            const int n = io_getevents(ctx_, 1, in_flight, events.data(), nullptr);
            if (n == -EINTR) continue;
            if (n < 0) {
                // Cannot reap: the requests still in flight are cancelled or waited for
                // by io_destroy; report and give the context up.
                throw std::system_error(-n, std::generic_category(), "io_getevents failed");
            }
            for (int i = 0; i < n; ++i) {
                Slot& slot = *static_cast<Slot*>(events[static_cast<size_t>(i)].obj->data);
                // io_event.res is unsigned; a failed request stores -errno in it.
                const long res = static_cast<long>(events[static_cast<size_t>(i)].res);
                IOError e = complete(op, files, slot, res, bounce);
                if (e && !error) error = std::move(e);
                free_slots.push_back(slot_index(slots, &slot.cb));
                --in_flight;
            }
        }
        return error;
    }

   private:
    struct Slot {
        iocb cb{};
        char* user = nullptr;    // where the bytes live in the tensor
        char* io_buf = nullptr;  // what the kernel reads/writes: `user` or a bounce buffer
        std::int64_t len = 0;
        std::int64_t offset = 0;
    };

    static int slot_index(const std::vector<Slot>& slots, const iocb* cb) {
        return static_cast<int>(static_cast<const Slot*>(cb->data) - slots.data());
    }

    static constexpr int kMaxIdleRetries = 100000;

    // Finish one request: copy a bounced read back, and move the rest of a short
    // transfer with plain calls (short AIO results are legal, if rare, on regular files).
    IOError complete(Op op, const Files& files, const Slot& slot, long res, bool bounce) {
        if (res < 0) {
            return {static_cast<int>(-res),
                    std::string(op_name(op)) + " of " + std::to_string(slot.len) + " bytes at byte " +
                        std::to_string(slot.offset)};
        }
        const std::int64_t done = std::min<std::int64_t>(res, slot.len);
        if (bounce && op == Op::kRead) std::memcpy(slot.user, slot.io_buf, static_cast<size_t>(done));
        if (done < slot.len) {
            return sync_transfer(op, files.buffered_fd, slot.user + done, slot.len - done, slot.offset + done);
        }
        return {};
    }

    void ensure_bounce_buffers() {
        if (!bounce_.empty()) return;
        for (int i = 0; i < queue_depth_; ++i) {
            void* p = nullptr;
            if (posix_memalign(&p, kDirectAlignment, static_cast<size_t>(block_size_)) != 0) {
                throw std::bad_alloc();
            }
            bounce_.push_back(static_cast<char*>(p));
        }
    }

    io_context_t ctx_ = nullptr;
    int queue_depth_;
    std::int64_t block_size_;
    bool direct_;
    std::vector<char*> bounce_;  // one aligned block per slot, made on first unaligned use
};

}  // namespace aio
