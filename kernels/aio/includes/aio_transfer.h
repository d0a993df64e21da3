// One file range moved between memory and a file through Linux AIO (libaio).
//
// Torch-free on purpose: the engine sees raw pointers, byte ranges and file
// descriptors; the bindings in aio/async_io.cpp own tensors, paths and Python errors.
#pragma once

#include <fcntl.h>
#include <libaio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

// Bytes [begin, end) of the buffer (not of the file: see Files::offset).
struct Range {
    std::int64_t begin;
    std::int64_t end;
};

// The bytes one request moves. O_DIRECT moves whole pages only, so a direct operation's
// requests are `block_size` rounded up to whole pages (DeepSpeed's handle takes any block
// size, 1024 in its own tests); a buffered one's are `block_size` as given.
inline std::int64_t request_block(std::int64_t block_size, bool direct) {
    if (!direct) return block_size;
    return (block_size + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

// How many bytes at the start of a buffer written at file position `offset` come
// before the first page-aligned file position: under O_DIRECT they move with plain calls.
inline std::int64_t direct_head(std::int64_t offset) {
    return (kDirectAlignment - offset % kDirectAlignment) % kDirectAlignment;
}

// Split [0, nbytes) into the head [0, head), when there is one, and at most `parts`
// ranges after it whose boundaries fall `head` plus a multiple of `block` into the
// buffer. With head = direct_head(offset) every boundary is then an aligned file
// position, so only the head and the very last request can be partial pages.
inline std::vector<Range> split_range(std::int64_t nbytes, std::int64_t block, int parts, std::int64_t head = 0) {
    std::vector<Range> out;
    head = std::min(head, std::max<std::int64_t>(nbytes, 0));
    if (head > 0) out.push_back({0, head});
    const std::int64_t rest = nbytes - head;
    if (rest <= 0) return out;
    const std::int64_t blocks = (rest + block - 1) / block;
    const std::int64_t per_part = (blocks + parts - 1) / parts;
    for (std::int64_t first = 0; first < blocks; first += per_part) {
        out.push_back({head + first * block, std::min(nbytes, head + (first + per_part) * block)});
    }
    return out;
}

// The descriptors of one open file, and where the buffer goes in it. direct_fd is -1
// unless this operation uses O_DIRECT; the buffered descriptor then serves what
// O_DIRECT cannot (unaligned heads and tails, short results).
struct Files {
    int buffered_fd = -1;
    int direct_fd = -1;
    std::int64_t offset = 0;  // the file position of the buffer's byte 0
};

// What a context did, so callers (and tests) can see the knobs honoured. Written by the
// one worker that owns the context, read by stats() while it may run: relaxed atomics.
struct Counters {
    std::atomic<std::int64_t> requests{0};            // AIO requests prepared
    std::atomic<std::int64_t> submit_calls{0};        // io_submit calls that accepted requests
    std::atomic<std::int64_t> overlapped_requests{0};  // requests prepared while others were in flight
    std::atomic<std::int64_t> reap_calls{0};          // io_getevents calls that returned events
    std::atomic<std::int64_t> max_in_flight{0};
    std::atomic<std::int64_t> direct_requests{0};   // requests on the O_DIRECT descriptor
    std::atomic<std::int64_t> bounced_requests{0};  // ... through an aligned bounce buffer
    std::atomic<std::int64_t> plain_calls{0};       // pieces moved with pread/pwrite instead

    void add(std::atomic<std::int64_t>& c, std::int64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
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

// Submission settings, DeepSpeed's names: single_submit hands io_submit one request
// per call (else every prepared one at once); overlap_events prepares new requests as
// soon as any completes (else a batch of queue_depth is submitted and reaped whole).
struct Config {
    int queue_depth;
    std::int64_t block_size;
    bool single_submit;
    bool overlap_events;
};

// One worker's AIO context: `queue_depth` requests of up to `block_size` bytes in
// flight. Used by one thread at a time.
class Context {
   public:
    explicit Context(const Config& config) : cfg_(config) {
        const int rc = io_setup(cfg_.queue_depth, &ctx_);
        if (rc < 0) {
            // EAGAIN here means the system-wide limit /proc/sys/fs/aio-max-nr is reached.
            throw std::system_error(-rc, std::generic_category(),
                                    "io_setup(" + std::to_string(cfg_.queue_depth) + ") failed");
        }
    }
    ~Context() {
        io_destroy(ctx_);
        for (char* b : bounce_) std::free(b);
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    const Counters& counters() const { return counters_; }

    // Move bytes [r.begin, r.end) of the buffer at `base` to/from the file, byte i of
    // the buffer at file position files.offset + i. On error no new requests are
    // issued, the ones in flight are drained, and the first error is returned.
    IOError transfer(Op op, const Files& files, char* base, Range r) {
        const bool direct = files.direct_fd >= 0;
        const std::int64_t block = request_block(cfg_.block_size, direct);
        const int depth = cfg_.queue_depth;
        std::vector<Slot> slots(static_cast<size_t>(depth));
        std::vector<int> free_slots;
        for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
        std::vector<iocb*> pending;  // prepared, not yet accepted by io_submit
        std::vector<io_event> events(static_cast<size_t>(depth));
        std::int64_t next = r.begin;
        int in_flight = 0;
        int idle_retries = 0;
        IOError error;
        // Bounce buffers are made before anything is in flight, so a failed allocation
        // leaves no request behind. Direct requests start `block` (whole pages) apart, so the
        // first one's alignment is every one's.
        const bool may_bounce = reinterpret_cast<std::uintptr_t>(base + r.begin) % kDirectAlignment != 0;
        if (direct && may_bounce) ensure_bounce_buffers();

        while (true) {
            const bool may_prepare = cfg_.overlap_events || (in_flight == 0 && pending.empty());
            while (may_prepare && !error && next < r.end && !free_slots.empty()) {
                std::int64_t len = std::min(block, r.end - next);
                const std::int64_t pos = files.offset + next;
                if (direct) {
                    const std::int64_t misalign = pos % kDirectAlignment;
                    if (misalign != 0 || len < kDirectAlignment) {
                        // A piece O_DIRECT cannot move (up to the next aligned file position,
                        // or a last partial page): a plain call on the buffered descriptor.
                        if (misalign != 0) len = std::min(len, kDirectAlignment - misalign);
                        counters_.add(counters_.plain_calls);
                        error = sync_transfer(op, files.buffered_fd, base + next, len, pos);
                        next += len;
                        continue;
                    }
                    len -= len % kDirectAlignment;  // the partial page left goes through the branch above
                }
                const int s = free_slots.back();
                free_slots.pop_back();
                Slot& slot = slots[static_cast<size_t>(s)];
                slot.user = base + next;
                // O_DIRECT also wants the memory aligned; a tensor that is not gets a bounce buffer.
                slot.bounced = direct && reinterpret_cast<std::uintptr_t>(slot.user) % kDirectAlignment != 0;
                if (slot.bounced) ensure_bounce_buffers();  // made above already; kept as a guard
                slot.io_buf = slot.bounced ? bounce_[static_cast<size_t>(s)] : slot.user;
                slot.len = len;
                slot.offset = pos;
                if (slot.bounced && op == Op::kWrite) std::memcpy(slot.io_buf, slot.user, static_cast<size_t>(len));
                const int fd = direct ? files.direct_fd : files.buffered_fd;
                if (op == Op::kWrite) {
                    io_prep_pwrite(&slot.cb, fd, slot.io_buf, static_cast<size_t>(len), pos);
                } else {
                    io_prep_pread(&slot.cb, fd, slot.io_buf, static_cast<size_t>(len), pos);
                }
                slot.cb.data = &slot;  // io_prep_* clears the iocb, so set this after it
                pending.push_back(&slot.cb);
                counters_.add(counters_.requests);
                if (in_flight > 0) counters_.add(counters_.overlapped_requests);
                if (direct) counters_.add(counters_.direct_requests);
                if (slot.bounced) counters_.add(counters_.bounced_requests);
                next += len;
            }

            submit(op, files, slots, free_slots, pending, in_flight, idle_retries, error);

            if (in_flight == 0) {
                if (pending.empty() && (error || next >= r.end)) break;
                continue;
            }

            // Without overlap_events the whole batch is reaped before the next is prepared.
            const int min_events = cfg_.overlap_events ? 1 : in_flight;
            const int n = io_getevents(ctx_, min_events, in_flight, events.data(), nullptr);
            if (n == -EINTR) continue;
            if (n < 0) {
                // Cannot reap: the requests still in flight are cancelled or waited for
                // by io_destroy; report and give the context up.
                throw std::system_error(-n, std::generic_category(), "io_getevents failed");
            }
            if (n > 0) counters_.add(counters_.reap_calls);
            for (int i = 0; i < n; ++i) {
                Slot& slot = *static_cast<Slot*>(events[static_cast<size_t>(i)].obj->data);
                // io_event.res is unsigned; a failed request stores -errno in it.
                const long res = static_cast<long>(events[static_cast<size_t>(i)].res);
                IOError e = complete(op, files, slot, res);
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
        bool bounced = false;
        std::int64_t len = 0;
        std::int64_t offset = 0;  // file position
    };

    static int slot_index(const std::vector<Slot>& slots, const iocb* cb) {
        return static_cast<int>(static_cast<const Slot*>(cb->data) - slots.data());
    }

    static constexpr int kMaxIdleRetries = 100000;

    // Hand the prepared requests to the kernel: one per call with single_submit, else
    // all at once. Stops early when the kernel is out of slots (reaping frees some).
    void submit(Op op, const Files& files, std::vector<Slot>& slots, std::vector<int>& free_slots,
                std::vector<iocb*>& pending, int& in_flight, int& idle_retries, IOError& error) {
        while (!pending.empty()) {
            const long count = cfg_.single_submit ? 1 : static_cast<long>(pending.size());
            const int rc = io_submit(ctx_, count, pending.data());
            if (rc > 0) {
                counters_.add(counters_.submit_calls);
                idle_retries = 0;
                pending.erase(pending.begin(), pending.begin() + rc);
                in_flight += rc;
                if (in_flight > counters_.max_in_flight.load(std::memory_order_relaxed)) {
                    counters_.max_in_flight.store(in_flight, std::memory_order_relaxed);
                }
                continue;
            }
            if (rc == -EINVAL && files.direct_fd < 0) {
                // Files without AIO support (pipes, most character devices) refuse
                // every request: move these bytes with plain calls instead.
                for (iocb* cb : pending) {
                    const Slot& slot = slots[static_cast<size_t>(slot_index(slots, cb))];
                    counters_.add(counters_.plain_calls);
                    IOError e = sync_transfer(op, files.buffered_fd, slot.user, slot.len, slot.offset);
                    if (e && !error) error = std::move(e);
                    free_slots.push_back(slot_index(slots, cb));
                }
                pending.clear();
            } else if (rc == -EAGAIN || rc == -EINTR) {
                // The kernel is out of request slots: reap first, or retry shortly.
                if (in_flight > 0) return;
                std::this_thread::yield();
                if (rc == -EAGAIN && ++idle_retries > kMaxIdleRetries) {
                    if (!error) error = {EAGAIN, "io_submit kept refusing requests with none in flight"};
                    for (iocb* cb : pending) free_slots.push_back(slot_index(slots, cb));
                    pending.clear();
                }
                return;
            } else {
                if (!error) error = {-rc, "io_submit"};
                for (iocb* cb : pending) free_slots.push_back(slot_index(slots, cb));
                pending.clear();
            }
        }
    }

    // Finish one request: copy a bounced read back, and move the rest of a short
    // transfer with plain calls (short AIO results are legal, if rare, on regular files).
    IOError complete(Op op, const Files& files, const Slot& slot, long res) {
        if (res < 0) {
            return {static_cast<int>(-res),
                    std::string(op_name(op)) + " of " + std::to_string(slot.len) + " bytes at byte " +
                        std::to_string(slot.offset)};
        }
        const std::int64_t done = std::min<std::int64_t>(res, slot.len);
        if (slot.bounced && op == Op::kRead) std::memcpy(slot.user, slot.io_buf, static_cast<size_t>(done));
        if (done < slot.len) {
            counters_.add(counters_.plain_calls);
            return sync_transfer(op, files.buffered_fd, slot.user + done, slot.len - done, slot.offset + done);
        }
        return {};
    }

    void ensure_bounce_buffers() {
        if (!bounce_.empty()) return;
        for (int i = 0; i < cfg_.queue_depth; ++i) {
            void* p = nullptr;
            // Only direct requests bounce, and theirs are whole pages (request_block).
            const auto bytes = static_cast<size_t>(request_block(cfg_.block_size, true));
            if (posix_memalign(&p, kDirectAlignment, bytes) != 0) {
                throw std::bad_alloc();
            }
            bounce_.push_back(static_cast<char*>(p));
        }
    }

    io_context_t ctx_ = nullptr;
    Config cfg_;
    Counters counters_;
    std::vector<char*> bounce_;  // one aligned request block per slot, made on first unaligned use
};

}  // namespace aio
