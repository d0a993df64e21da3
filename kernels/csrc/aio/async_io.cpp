// async_io: tensor reads and writes to files through Linux AIO, behind a handle.
//
// A handle owns `thread_count` worker threads, each with its own AIO context of
// `queue_depth` requests of `block_size` bytes. Every read or write is split into
// `thread_count` block-aligned ranges that the workers move concurrently. async_*
// calls open the file, check sizes and queue the work (errors a caller can fix are
// raised right there); wait() blocks, without the GIL, until every queued operation
// is done and raises the I/O errors they met as OSError.
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/extension.h>
#include <unistd.h>

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

// Raise OSError(errno, message, path); Python picks the subclass from errno
// (FileNotFoundError for ENOENT, PermissionError for EACCES, ...).
[[noreturn]] void raise_os_error(int err, const std::string& message, const std::string& path) {
    py::object name = py::module_::import("os").attr("fsdecode")(py::bytes(path));
    py::object exc = py::module_::import("builtins").attr("OSError")(err, message, name);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

// str, bytes or os.PathLike -> the file system's bytes for the name.
std::string fs_path(const py::handle& path) {
    return py::module_::import("os").attr("fsencode")(path).cast<std::string>();
}

struct Job {
    aio::Op op;
    std::string path;
    char* data;
    std::int64_t nbytes;
    aio::Files files;
    int remaining = 0;  // ranges not yet done; guarded by the handle's mutex
    std::vector<aio::IOError> errors;

    void close_files() {
        if (files.buffered_fd >= 0) ::close(files.buffered_fd);
        if (files.direct_fd >= 0) ::close(files.direct_fd);
        files = {};
    }
};

// A queued async operation: its job, and the tensor kept alive until wait() returns.
struct Outstanding {
    std::shared_ptr<Job> job;
    at::Tensor tensor;
};

class AsyncIOHandle {
   public:
    AsyncIOHandle(std::int64_t block_size, int queue_depth, int thread_count, bool use_direct_io)
        : block_size_(block_size),
          queue_depth_(queue_depth),
          thread_count_(thread_count),
          direct_(use_direct_io) {
        if (block_size <= 0) throw py::value_error("block_size must be positive");
        if (queue_depth <= 0) throw py::value_error("queue_depth must be positive");
        if (thread_count <= 0) throw py::value_error("thread_count must be positive");
        if (use_direct_io && block_size % aio::kDirectAlignment != 0) {
            throw py::value_error("use_direct_io needs a block_size that is a multiple of " +
                                  std::to_string(aio::kDirectAlignment));
        }
        // Contexts are made here, not in the workers, so a refused io_setup (the
        // system-wide limit fs.aio-max-nr) is an error of this constructor.
        for (int i = 0; i < thread_count; ++i) {
            try {
                contexts_.push_back(std::make_unique<aio::Context>(queue_depth, block_size, use_direct_io));
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

    std::int64_t async_pwrite(const at::Tensor& tensor, const py::handle& path) {
        return submit_async(aio::Op::kWrite, tensor, path);
    }
    std::int64_t async_pread(const at::Tensor& tensor, const py::handle& path) {
        return submit_async(aio::Op::kRead, tensor, path);
    }
    std::int64_t sync_pwrite(const at::Tensor& tensor, const py::handle& path) {
        return run_sync(aio::Op::kWrite, tensor, path);
    }
    std::int64_t sync_pread(const at::Tensor& tensor, const py::handle& path) {
        return run_sync(aio::Op::kRead, tensor, path);
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

    std::int64_t block_size() const { return block_size_; }
    int queue_depth() const { return queue_depth_; }
    int thread_count() const { return thread_count_; }
    bool use_direct_io() const { return direct_; }

   private:
    std::int64_t submit_async(aio::Op op, const at::Tensor& tensor, const py::handle& path) {
        auto job = open_job(op, tensor, fs_path(path));
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

    std::int64_t run_sync(aio::Op op, const at::Tensor& tensor, const py::handle& path) {
        auto job = open_job(op, tensor, fs_path(path));
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

    // Check the tensor and open the file; everything a caller can fix fails here,
    // before anything is queued.
    std::shared_ptr<Job> open_job(aio::Op op, const at::Tensor& tensor, std::string path) {
        TORCH_CHECK_VALUE(tensor.device().is_cpu(), "async_io: the tensor must be on the CPU, got ",
                          tensor.device());
        TORCH_CHECK_VALUE(tensor.is_contiguous(), "async_io: the tensor must be contiguous");
        auto job = std::make_shared<Job>();
        job->op = op;
        job->path = std::move(path);
        job->data = static_cast<char*>(tensor.data_ptr());
        job->nbytes = static_cast<std::int64_t>(tensor.numel()) * static_cast<std::int64_t>(tensor.element_size());

        const char* name = job->path.c_str();
        const int base_flags = op == aio::Op::kWrite ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY;
        job->files.buffered_fd = ::open(name, base_flags | O_CLOEXEC, 0666);
        if (job->files.buffered_fd < 0) {
            const int err = errno;
            raise_os_error(err,
                           std::string("async_io: cannot open the file for ") +
                               (op == aio::Op::kWrite ? "writing: " : "reading: ") +
                               aio::errno_text(err),
                           job->path);
        }
        if (op == aio::Op::kRead) {
            struct stat st {};
            if (::fstat(job->files.buffered_fd, &st) != 0) {
                const int err = errno;
                job->close_files();
                raise_os_error(err, "async_io: cannot stat the file: " + aio::errno_text(err), job->path);
            }
            const std::int64_t file_bytes = st.st_size;
            if (file_bytes != job->nbytes) {
                job->close_files();
                const char* what = file_bytes > job->nbytes ? "the tensor is too small for the file"
                                                            : "the file is smaller than the tensor";
                throw py::value_error(std::string("async_io: ") + what + ": " + job->path + " holds " +
                                      std::to_string(file_bytes) + " bytes, the tensor " +
                                      std::to_string(job->nbytes) + " bytes (numel * element_size)");
            }
        }
        if (direct_) {
            // The O_TRUNC above already emptied the file; the direct descriptor only adds O_DIRECT.
            const int direct_flags = (op == aio::Op::kWrite ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC;
            job->files.direct_fd = ::open(name, direct_flags);
            if (job->files.direct_fd < 0) {
                const int err = errno;
                job->close_files();
                std::string why = aio::errno_text(err);
                if (err == EINVAL) why += " (this file system does not support O_DIRECT; use use_direct_io=False)";
                raise_os_error(err, "async_io: cannot open the file with O_DIRECT: " + why, job->path);
            }
        }
        return job;
    }

    void enqueue_locked(const std::shared_ptr<Job>& job, bool is_async) {
        const auto ranges = aio::split_range(job->nbytes, block_size_, thread_count_);
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

    [[noreturn]] void raise_job_error(const Job& job, size_t other_failed_ops) {
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

    const std::int64_t block_size_;
    const int queue_depth_;
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
        .def(py::init<std::int64_t, int, int, bool>(), py::arg("block_size") = 1 << 20,
             py::arg("queue_depth") = 32, py::arg("thread_count") = 1, py::arg("use_direct_io") = false)
        .def("async_pwrite", &AsyncIOHandle::async_pwrite, py::arg("tensor"), py::arg("path"),
             "Queue a write of the tensor's bytes to path (created or truncated); returns the byte count.")
        .def("async_pread", &AsyncIOHandle::async_pread, py::arg("tensor"), py::arg("path"),
             "Queue a read of path into the tensor (sizes must match); returns the byte count.")
        .def("wait", &AsyncIOHandle::wait,
             "Wait for every queued operation; returns how many completed, raises OSError on I/O errors.")
        .def("sync_pwrite", &AsyncIOHandle::sync_pwrite, py::arg("tensor"), py::arg("path"),
             "Write the tensor's bytes to path and wait; returns the byte count.")
        .def("sync_pread", &AsyncIOHandle::sync_pread, py::arg("tensor"), py::arg("path"),
             "Read path into the tensor and wait; returns the byte count.")
        .def_property_readonly("block_size", &AsyncIOHandle::block_size)
        .def_property_readonly("queue_depth", &AsyncIOHandle::queue_depth)
        .def_property_readonly("thread_count", &AsyncIOHandle::thread_count)
        .def_property_readonly("use_direct_io", &AsyncIOHandle::use_direct_io);
}
