// async_io: tensor reads and writes to files through Linux AIO, behind a handle.
//
// A handle owns `thread_count` worker threads, each with its own AIO context of
// `queue_depth` requests of `block_size` bytes (rounded up to whole pages under O_DIRECT,
// which moves nothing less). Every read or write is split into
// `thread_count` block-aligned ranges that the workers move concurrently. async_*
// calls open the file, check sizes and queue the work (errors a caller can fix are
// raised right there); wait() blocks, without the GIL, until every queued operation
// is done and raises the I/O errors they met as OSError.
//
// A file is a path (opened and closed here) or a caller's open descriptor (used, never
// closed). offset None means the tensor is the whole file (a write truncates it, a
// read needs the sizes equal); an int is where in the file the tensor's bytes go.
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/extension.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "aio_transfer.h"

namespace py = pybind11;

namespace {

// str, bytes or os.PathLike -> the file system's bytes for the name.
std::string fs_path(const py::handle& path) {
    return py::module_::import("os").attr("fsencode")(path).cast<std::string>();
}

// Raise OSError(errno, message, path); Python picks the subclass from errno
// (FileNotFoundError for ENOENT, PermissionError for EACCES, ...). A descriptor has
// no file name (empty path), as with os.fstat.
[[noreturn]] void raise_os_error(int err, const std::string& message, const std::string& path) {
    py::object name = py::none();
    if (!path.empty()) name = py::module_::import("os").attr("fsdecode")(py::bytes(path));
    py::object exc = py::module_::import("builtins").attr("OSError")(err, message, name);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

struct Job {
    aio::Op op;
    std::string path;  // empty when the caller passed a descriptor
    int caller_fd = -1;
    char* data = nullptr;
    std::int64_t nbytes = 0;
    std::int64_t head = 0;  // bytes before the first aligned file position (O_DIRECT only)
    aio::Files files;
    std::vector<int> owned_fds;  // what this job opened, and closes; never the caller's
    int remaining = 0;           // ranges not yet done; guarded by the handle's mutex
    std::vector<aio::IOError> errors;

    std::string name() const { return path.empty() ? "file descriptor " + std::to_string(caller_fd) : path; }

    void close_files() {
        for (int fd : owned_fds) ::close(fd);
        owned_fds.clear();
        files.buffered_fd = files.direct_fd = -1;
    }

    // Errors found while opening: close what this job opened, then raise.
    [[noreturn]] void raise_os_error(int err, const std::string& message) {
        close_files();
        ::raise_os_error(err, message, path);
    }

    [[noreturn]] void raise_value_error(const std::string& message) {
        close_files();
        throw py::value_error(message);
    }
};

// A queued async operation: its job, and the tensor kept alive until wait() returns.
struct Outstanding {
    std::shared_ptr<Job> job;
    at::Tensor tensor;
};

class AsyncIOHandle {
   public:
    AsyncIOHandle(std::int64_t block_size, int queue_depth, int thread_count, bool use_direct_io,
                  bool single_submit, bool overlap_events)
        : config_{queue_depth, block_size, single_submit, overlap_events},
          thread_count_(thread_count),
          direct_(use_direct_io) {
        if (block_size <= 0) throw py::value_error("block_size must be positive");
        if (queue_depth <= 0) throw py::value_error("queue_depth must be positive");
        if (thread_count <= 0) throw py::value_error("thread_count must be positive");
        // Contexts are made here, not in the workers, so a refused io_setup (the
        // system-wide limit fs.aio-max-nr) is an error of this constructor.
        for (int i = 0; i < thread_count; ++i) {
            try {
                contexts_.push_back(std::make_unique<aio::Context>(config_));
            } catch (const std::system_error& e) {
                throw std::runtime_error(std::string("async_io: ") + e.what() +
                                         " (raise fs.aio-max-nr or lower queue_depth * thread_count)");
            }
        }
        for (int i = 0; i < thread_count; ++i) workers_.emplace_back([this, i] { worker(i); });
    }

    ~AsyncIOHandle() {
        {
            // Workers still finish what is queued: the queued buffers are alive (the
            // Outstanding list holds them) until the workers are joined below.
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        work_cv_.notify_all();
        for (auto& w : workers_) w.join();
        for (auto& o : outstanding_) o.job->close_files();
    }

    AsyncIOHandle(const AsyncIOHandle&) = delete;
    AsyncIOHandle& operator=(const AsyncIOHandle&) = delete;

    std::int64_t async_pwrite(const at::Tensor& tensor, const py::handle& file, const py::object& offset) {
        return submit_async(aio::Op::kWrite, tensor, file, offset);
    }
    std::int64_t async_pread(const at::Tensor& tensor, const py::handle& file, const py::object& offset) {
        return submit_async(aio::Op::kRead, tensor, file, offset);
    }
    std::int64_t sync_pwrite(const at::Tensor& tensor, const py::handle& file, const py::object& offset) {
        return run_sync(aio::Op::kWrite, tensor, file, offset);
    }
    std::int64_t sync_pread(const at::Tensor& tensor, const py::handle& file, const py::object& offset) {
        return run_sync(aio::Op::kRead, tensor, file, offset);
    }

    // Block until every queued async operation is done; return how many were.
    std::int64_t wait() {
        std::vector<Outstanding> done;
        {
            py::gil_scoped_release no_gil;
            std::unique_lock<std::mutex> lock(mu_);
            done_cv_.wait(lock, [this] { return unfinished_async_ == 0; });
            done.swap(outstanding_);
        }
        std::vector<const Job*> failed;
        for (const auto& o : done) {
            if (!o.job->errors.empty()) failed.push_back(o.job.get());
        }
        if (!failed.empty()) raise_job_error(*failed.front(), failed.size() - 1);
        return static_cast<std::int64_t>(done.size());
    }

    // What the contexts did so far, summed (max_in_flight: the largest of any one).
    py::dict stats() const {
        std::int64_t requests = 0, submits = 0, overlapped = 0, reaps = 0, max_in_flight = 0;
        std::int64_t direct = 0, bounced = 0, plain = 0;
        for (const auto& ctx : contexts_) {
            const aio::Counters& c = ctx->counters();
            const auto get = [](const std::atomic<std::int64_t>& v) { return v.load(std::memory_order_relaxed); };
            requests += get(c.requests);
            submits += get(c.submit_calls);
            overlapped += get(c.overlapped_requests);
            reaps += get(c.reap_calls);
            max_in_flight = std::max(max_in_flight, get(c.max_in_flight));
            direct += get(c.direct_requests);
            bounced += get(c.bounced_requests);
            plain += get(c.plain_calls);
        }
        py::dict d;
        d["requests"] = requests;
        d["submit_calls"] = submits;
        d["overlapped_requests"] = overlapped;
        d["reap_calls"] = reaps;
        d["max_in_flight"] = max_in_flight;
        d["direct_requests"] = direct;
        d["bounced_requests"] = bounced;
        d["plain_calls"] = plain;
        return d;
    }

    std::int64_t block_size() const { return config_.block_size; }
    int queue_depth() const { return config_.queue_depth; }
    int thread_count() const { return thread_count_; }
    bool use_direct_io() const { return direct_; }
    bool single_submit() const { return config_.single_submit; }
    bool overlap_events() const { return config_.overlap_events; }

   private:
    std::int64_t submit_async(aio::Op op, const at::Tensor& tensor, const py::handle& file,
                              const py::object& offset) {
        auto job = open_job(op, tensor, file, offset);
        const std::int64_t nbytes = job->nbytes;
        {
            std::lock_guard<std::mutex> lock(mu_);
            outstanding_.push_back({job, tensor});
            ++unfinished_async_;
            enqueue_locked(job, /*is_async=*/true);
        }
        work_cv_.notify_all();
        return nbytes;
    }

    std::int64_t run_sync(aio::Op op, const at::Tensor& tensor, const py::handle& file, const py::object& offset) {
        auto job = open_job(op, tensor, file, offset);
        {
            py::gil_scoped_release no_gil;
            std::unique_lock<std::mutex> lock(mu_);
            enqueue_locked(job, /*is_async=*/false);
            work_cv_.notify_all();
            done_cv_.wait(lock, [&job] { return job->remaining == 0; });
        }
        if (!job->errors.empty()) raise_job_error(*job, 0);
        return job->nbytes;
    }

    // Check the arguments and open the file; everything a caller can fix fails here,
    // before anything is queued.
    std::shared_ptr<Job> open_job(aio::Op op, const at::Tensor& tensor, const py::handle& file,
                                  const py::object& offset) {
        TORCH_CHECK_VALUE(tensor.device().is_cpu(), "async_io: the tensor must be on the CPU, got ",
                          tensor.device());
        TORCH_CHECK_VALUE(tensor.is_contiguous(), "async_io: the tensor must be contiguous");
        const bool whole = offset.is_none();
        if (!whole && !py::isinstance<py::int_>(offset)) throw py::type_error("async_io: offset must be an int or None");
        auto job = std::make_shared<Job>();
        job->op = op;
        job->data = static_cast<char*>(tensor.data_ptr());
        job->nbytes = static_cast<std::int64_t>(tensor.numel()) * static_cast<std::int64_t>(tensor.element_size());
        if (!whole) {
            job->files.offset = offset.cast<std::int64_t>();
            if (job->files.offset < 0) {
                throw py::value_error("async_io: offset must be >= 0, got " + std::to_string(job->files.offset));
            }
        }
        // A bool is an int to Python, never a descriptor here: it goes to os.fsencode, which refuses it.
        if (py::isinstance<py::int_>(file) && !py::isinstance<py::bool_>(file)) {
            open_descriptor(*job, file.cast<int>(), whole);
        } else {
            open_path(*job, fs_path(file), whole);
        }
        if (op == aio::Op::kRead) check_read_size(*job, whole);
        if (job->files.direct_fd >= 0) {
            job->head = aio::direct_head(job->files.offset);
            if (op == aio::Op::kWrite) preallocate(*job);
        }
        return job;
    }

    // O_DIRECT writes past the end of a file are serialised by the file system (ext4
    // waits for the requests in flight before each one that grows the file), which made
    // a queue of 32 three times slower than one plain call after another. Allocating the
    // new part first keeps every request inside the file. With one request in flight
    // there is nothing to serialise, and converting the preallocated blocks costs more
    // than it saves, so then it is left out. Only an optimisation: where fallocate is
    // unsupported, the writes go ahead, and they report any real error (ENOSPC) themselves.
    void preallocate(const Job& job) const {
        if (config_.queue_depth == 1 && thread_count_ == 1) return;
        struct stat st {};
        if (::fstat(job.files.buffered_fd, &st) != 0) return;
        const std::int64_t from = std::max<std::int64_t>(st.st_size, job.files.offset);
        const std::int64_t end = job.files.offset + job.nbytes;
        if (end > from) (void)::fallocate(job.files.buffered_fd, 0, from, end - from);
    }

    void open_path(Job& job, std::string path, bool whole) {
        job.path = std::move(path);
        const char* name = job.path.c_str();
        const bool write = job.op == aio::Op::kWrite;
        const int base_flags = write ? O_WRONLY | O_CREAT | (whole ? O_TRUNC : 0) : O_RDONLY;
        const int fd = ::open(name, base_flags | O_CLOEXEC, 0666);
        if (fd < 0) {
            const int err = errno;
            job.raise_os_error(err, std::string("async_io: cannot open the file for ") +
                                        (write ? "writing: " : "reading: ") + aio::errno_text(err));
        }
        job.owned_fds.push_back(fd);
        job.files.buffered_fd = fd;
        if (direct_) {
            // The O_TRUNC above already emptied the file; the direct descriptor only adds O_DIRECT.
            job.files.direct_fd = open_owned(job, name, (write ? O_WRONLY : O_RDONLY) | O_DIRECT, "open the file");
        }
    }

    // A caller's descriptor: checked, used as it is, and paired with a reopened one of the
    // other flavour when O_DIRECT is involved (direct I/O needs a buffered descriptor for
    // unaligned pieces, and a buffered descriptor cannot be switched without changing the
    // caller's file description).
    void open_descriptor(Job& job, int fd, bool whole) {
        job.caller_fd = fd;
        const std::string what = job.name();
        const bool write = job.op == aio::Op::kWrite;
        const int flags = fd < 0 ? -1 : ::fcntl(fd, F_GETFL);
        if (flags < 0) {
            const int err = fd < 0 ? EBADF : errno;
            job.raise_os_error(err, "async_io: " + what + " is not open: " + aio::errno_text(err));
        }
        const int mode = flags & O_ACCMODE;
        if (mode != O_RDWR && mode != (write ? O_WRONLY : O_RDONLY)) {
            job.raise_os_error(EBADF, "async_io: " + what + " is not open for " + (write ? "writing" : "reading"));
        }
        if (write && (flags & O_APPEND) != 0) {
            job.raise_value_error("async_io: " + what +
                                  " was opened with O_APPEND, which makes every write go to the end of the "
                                  "file whatever its offset; open it without O_APPEND");
        }
        const std::string proc = "/proc/self/fd/" + std::to_string(fd);
        const int access = write ? O_WRONLY : O_RDONLY;
        if ((flags & O_DIRECT) != 0) {
            job.files.direct_fd = fd;
            job.files.buffered_fd = open_owned(job, proc.c_str(), access, "reopen " + what + " without O_DIRECT");
        } else {
            job.files.buffered_fd = fd;
            if (direct_) {
                job.files.direct_fd = open_owned(job, proc.c_str(), access | O_DIRECT, "reopen " + what);
            }
        }
        if (write && whole && ::ftruncate(job.files.buffered_fd, 0) != 0) {
            const int err = errno;
            job.raise_os_error(err, "async_io: cannot truncate " + what + ": " + aio::errno_text(err));
        }
    }

    static int open_owned(Job& job, const char* name, int flags, const std::string& what) {
        const int fd = ::open(name, flags | O_CLOEXEC);
        if (fd < 0) {
            const int err = errno;
            std::string why = aio::errno_text(err);
            if (err == EINVAL && (flags & O_DIRECT) != 0) {
                why += " (this file system does not support O_DIRECT; use use_direct_io=False)";
            }
            const char* how = (flags & O_DIRECT) != 0 ? " with O_DIRECT: " : ": ";
            job.raise_os_error(err, "async_io: cannot " + what + how + why);
        }
        job.owned_fds.push_back(fd);
        return fd;
    }

    static void check_read_size(Job& job, bool whole) {
        struct stat st {};
        if (::fstat(job.files.buffered_fd, &st) != 0) {
            const int err = errno;
            job.raise_os_error(err, "async_io: cannot stat the file: " + aio::errno_text(err));
        }
        const std::int64_t file_bytes = st.st_size;
        const std::string holds = job.name() + " holds " + std::to_string(file_bytes) + " bytes";
        if (whole && file_bytes != job.nbytes) {
            const char* what = file_bytes > job.nbytes ? "the tensor is too small for the file"
                                                       : "the file is smaller than the tensor";
            job.raise_value_error(std::string("async_io: ") + what + ": " + holds + ", the tensor " +
                                  std::to_string(job.nbytes) + " bytes (numel * element_size)");
        }
        const std::int64_t end = job.files.offset + job.nbytes;
        if (!whole && end > file_bytes) {
            job.raise_value_error("async_io: the file is too short for the read: " + holds +
                                  ", the read needs bytes [" + std::to_string(job.files.offset) + ", " +
                                  std::to_string(end) + ")");
        }
    }

    void enqueue_locked(const std::shared_ptr<Job>& job, bool is_async) {
        // Ranges are whole requests, so that only a range's last request can be a partial page.
        const std::int64_t block = aio::request_block(config_.block_size, job->files.direct_fd >= 0);
        const auto ranges = aio::split_range(job->nbytes, block, thread_count_, job->head);
        job->remaining = static_cast<int>(ranges.size());
        if (ranges.empty()) {
            // Nothing to move (an empty tensor): the open above already made or checked the file.
            finish_locked(*job, is_async);
            return;
        }
        for (const auto& r : ranges) queue_.push_back({job, r, is_async});
    }

    // The last range of a job is done: close its files and wake whoever waits.
    void finish_locked(Job& job, bool is_async) {
        job.close_files();
        if (is_async) --unfinished_async_;
        done_cv_.notify_all();
    }

    void worker(int index) {
        aio::Context& ctx = *contexts_[static_cast<size_t>(index)];
        while (true) {
            QueuedTask task;
            {
                std::unique_lock<std::mutex> lock(mu_);
                work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
                if (queue_.empty()) return;  // stopping, and nothing left to do
                task = std::move(queue_.front());
                queue_.pop_front();
            }
            aio::IOError error;
            try {
                error = ctx.transfer(task.job->op, task.job->files, task.job->data, task.range);
            } catch (const std::system_error& e) {
                error = {e.code().value(), e.what()};
            } catch (const std::exception& e) {
                error = {EIO, e.what()};
            }
            std::lock_guard<std::mutex> lock(mu_);
            if (error) task.job->errors.push_back(std::move(error));
            if (--task.job->remaining == 0) finish_locked(*task.job, task.is_async);
            // Drop this worker's reference under the lock, so the waiter always holds the last one.
            task.job.reset();
        }
    }

    [[noreturn]] static void raise_job_error(const Job& job, size_t other_failed_ops) {
        const aio::IOError& e = job.errors.front();
        std::string message = std::string("async_io: ") + aio::op_name(job.op) + " failed (" + e.detail +
                               "): " + aio::errno_text(e.err);
        if (job.errors.size() > 1) message += "; " + std::to_string(job.errors.size() - 1) + " more ranges failed";
        if (other_failed_ops > 0) {
            message += "; " + std::to_string(other_failed_ops) + " other operations failed too";
        }
        raise_os_error(e.err, message, job.path);
    }

    struct QueuedTask {
        std::shared_ptr<Job> job;
        aio::Range range{0, 0};
        bool is_async = false;
    };

    const aio::Config config_;
    const int thread_count_;
    const bool direct_;

    std::mutex mu_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    std::deque<QueuedTask> queue_;
    std::vector<Outstanding> outstanding_;
    std::int64_t unfinished_async_ = 0;
    bool stop_ = false;

    std::vector<std::unique_ptr<aio::Context>> contexts_;
    std::vector<std::thread> workers_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "Asynchronous tensor reads and writes to files through Linux AIO (libaio)";
    m.attr("DIRECT_IO_ALIGNMENT") = aio::kDirectAlignment;
    py::class_<AsyncIOHandle>(m, "AsyncIOHandle")
        .def(py::init<std::int64_t, int, int, bool, bool, bool>(), py::arg("block_size") = 1 << 20,
             py::arg("queue_depth") = 32, py::arg("thread_count") = 1, py::arg("use_direct_io") = false,
             py::arg("single_submit") = false, py::arg("overlap_events") = true)
        .def("async_pwrite", &AsyncIOHandle::async_pwrite, py::arg("tensor"), py::arg("file"),
             py::arg("offset") = py::none(),
             "Queue a write of the tensor's bytes to a path or descriptor; returns the byte count.")
        .def("async_pread", &AsyncIOHandle::async_pread, py::arg("tensor"), py::arg("file"),
             py::arg("offset") = py::none(),
             "Queue a read of a path or descriptor into the tensor; returns the byte count.")
        .def("wait", &AsyncIOHandle::wait,
             "Wait for every queued operation; returns how many completed, raises OSError on I/O errors.")
        .def("sync_pwrite", &AsyncIOHandle::sync_pwrite, py::arg("tensor"), py::arg("file"),
             py::arg("offset") = py::none(), "Write the tensor's bytes and wait; returns the byte count.")
        .def("sync_pread", &AsyncIOHandle::sync_pread, py::arg("tensor"), py::arg("file"),
             py::arg("offset") = py::none(), "Read into the tensor and wait; returns the byte count.")
        .def("stats", &AsyncIOHandle::stats, "Counters of what the AIO contexts did so far.")
        .def_property_readonly("block_size", &AsyncIOHandle::block_size)
        .def_property_readonly("queue_depth", &AsyncIOHandle::queue_depth)
        .def_property_readonly("thread_count", &AsyncIOHandle::thread_count)
        .def_property_readonly("use_direct_io", &AsyncIOHandle::use_direct_io)
        .def_property_readonly("single_submit", &AsyncIOHandle::single_submit)
        .def_property_readonly("overlap_events", &AsyncIOHandle::overlap_events);
}
