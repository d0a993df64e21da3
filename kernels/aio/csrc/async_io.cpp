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
//
// Nothing here is torch's: the binding (below) is Python's C API, its limited API in a stable
// build (aio_python.h), and a tensor is read through its Python attributes (is_cpu, is_contiguous(),
// data_ptr(), nbytes) and held, as a Python object, until wait() has seen its transfer done. One
// module then serves every torch release and every CPython from 3.10 on.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "aio_python.h"
#include "aio_transfer.h"

namespace {

using aio_python::PythonError;
using aio_python::Ref;

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
        aio_python::raise_os_error(err, message, path);
    }

    [[noreturn]] void raise_value_error(const std::string& message) {
        close_files();
        aio_python::raise(PyExc_ValueError, message);
    }
};

// A queued async operation: its job, and the tensor kept alive until wait() returns.
struct Outstanding {
    std::shared_ptr<Job> job;
    Ref tensor;
};

class AsyncIOHandle {
   public:
    AsyncIOHandle(std::int64_t block_size, int queue_depth, int thread_count, bool use_direct_io,
                  bool single_submit, bool overlap_events)
        : config_{queue_depth, block_size, single_submit, overlap_events},
          thread_count_(thread_count),
          direct_(use_direct_io) {
        if (block_size <= 0) aio_python::raise(PyExc_ValueError, "block_size must be positive");
        if (queue_depth <= 0) aio_python::raise(PyExc_ValueError, "queue_depth must be positive");
        if (thread_count <= 0) aio_python::raise(PyExc_ValueError, "thread_count must be positive");
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

    // With the GIL held (the Python object's deallocation): the tensors still queued are
    // released after the workers are joined.
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

    // The transfers, with the GIL held: `tensor`, `file` and `offset` are the caller's objects.
    std::int64_t async_pwrite(PyObject* tensor, PyObject* file, PyObject* offset) {
        return submit_async(aio::Op::kWrite, tensor, file, offset);
    }
    std::int64_t async_pread(PyObject* tensor, PyObject* file, PyObject* offset) {
        return submit_async(aio::Op::kRead, tensor, file, offset);
    }
    std::int64_t sync_pwrite(PyObject* tensor, PyObject* file, PyObject* offset) {
        return run_sync(aio::Op::kWrite, tensor, file, offset);
    }
    std::int64_t sync_pread(PyObject* tensor, PyObject* file, PyObject* offset) {
        return run_sync(aio::Op::kRead, tensor, file, offset);
    }

    // Block until every queued async operation is done; return how many were.
    std::int64_t wait() {
        std::vector<Outstanding> done;
        {
            aio_python::GilReleased no_gil;
            std::unique_lock<std::mutex> lock(mu_);
            done_cv_.wait(lock, [this] { return unfinished_async_ == 0; });
            done.swap(outstanding_);
        }  // the GIL is back: `done` may release its tensors
        std::vector<const Job*> failed;
        for (const auto& o : done) {
            if (!o.job->errors.empty()) failed.push_back(o.job.get());
        }
        if (!failed.empty()) raise_job_error(*failed.front(), failed.size() - 1);
        return static_cast<std::int64_t>(done.size());
    }

    // What the contexts did so far, summed (max_in_flight: the largest of any one).
    std::vector<std::pair<const char*, std::int64_t>> stats() const {
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
        return {{"requests", requests},
                {"submit_calls", submits},
                {"overlapped_requests", overlapped},
                {"reap_calls", reaps},
                {"max_in_flight", max_in_flight},
                {"direct_requests", direct},
                {"bounced_requests", bounced},
                {"plain_calls", plain}};
    }

    std::int64_t block_size() const { return config_.block_size; }
    int queue_depth() const { return config_.queue_depth; }
    int thread_count() const { return thread_count_; }
    bool use_direct_io() const { return direct_; }
    bool single_submit() const { return config_.single_submit; }
    bool overlap_events() const { return config_.overlap_events; }

   private:
    std::int64_t submit_async(aio::Op op, PyObject* tensor, PyObject* file, PyObject* offset) {
        auto job = open_job(op, tensor, file, offset);
        const std::int64_t nbytes = job->nbytes;
        Ref held = Ref::borrowed(tensor);
        {
            std::lock_guard<std::mutex> lock(mu_);
            outstanding_.push_back({job, std::move(held)});
            ++unfinished_async_;
            enqueue_locked(job, /*is_async=*/true);
        }
        work_cv_.notify_all();
        return nbytes;
    }

    std::int64_t run_sync(aio::Op op, PyObject* tensor, PyObject* file, PyObject* offset) {
        auto job = open_job(op, tensor, file, offset);
        {
            aio_python::GilReleased no_gil;
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
    std::shared_ptr<Job> open_job(aio::Op op, PyObject* tensor, PyObject* file, PyObject* offset) {
        const aio_python::TensorBytes bytes = aio_python::cpu_tensor_bytes(tensor);
        const bool whole = offset == Py_None;
        if (!whole && !PyLong_Check(offset)) aio_python::raise(PyExc_TypeError, "async_io: offset must be an int or None");
        auto job = std::make_shared<Job>();
        job->op = op;
        job->data = bytes.data;
        job->nbytes = bytes.nbytes;
        if (!whole) {
            job->files.offset = aio_python::as_int64(offset);
            if (job->files.offset < 0) {
                aio_python::raise(PyExc_ValueError,
                                  "async_io: offset must be >= 0, got " + std::to_string(job->files.offset));
            }
        }
        // A bool is an int to Python, never a descriptor here: the path conversion refuses it.
        if (PyLong_Check(file) && !PyBool_Check(file)) {
            open_descriptor(*job, aio_python::as_descriptor(file), whole);
        } else {
            open_path(*job, aio_python::fs_path(file), whole);
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
        aio_python::raise_os_error(e.err, message, job.path);
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

// ------------------------------------------------------------------ the Python type and module

// op_abi.h's OP_STRINGIZE / OP_PYINIT, which this file cannot include: a stable build of op_abi.h
// pulls in torch's headers.
#define AIO_STRINGIZE_(x) #x
#define AIO_STRINGIZE(x) AIO_STRINGIZE_(x)
#define AIO_PYINIT_(name) PyInit_##name
#define AIO_PYINIT(name) AIO_PYINIT_(name)

namespace {

struct HandleObject {
    PyObject_HEAD AsyncIOHandle* handle;
};

// Run `body` for Python: a C++ exception becomes the Python one (PythonError: already set).
template <typename Body>
PyObject* for_python(Body&& body) {
    try {
        return body();
    } catch (const PythonError&) {
        return nullptr;
    } catch (const std::bad_alloc&) {
        return PyErr_NoMemory();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }
}

AsyncIOHandle& handle_of(PyObject* self) {
    AsyncIOHandle* handle = reinterpret_cast<HandleObject*>(self)->handle;
    if (handle == nullptr) aio_python::raise(PyExc_RuntimeError, "async_io: the handle was not initialised");
    return *handle;
}

int handle_init(PyObject* self, PyObject* args, PyObject* kwargs) {
    static const char* names[] = {"block_size",    "queue_depth",    "thread_count", "use_direct_io",
                                  "single_submit", "overlap_events", nullptr};
    long long block_size = 1 << 20;
    int queue_depth = 32, thread_count = 1, use_direct_io = 0, single_submit = 0, overlap_events = 1;
    if (PyArg_ParseTupleAndKeywords(args, kwargs, "|Liippp:AsyncIOHandle", const_cast<char**>(names), &block_size,
                                    &queue_depth, &thread_count, &use_direct_io, &single_submit,
                                    &overlap_events) == 0) {
        return -1;
    }
    PyObject* made = for_python([&]() -> PyObject* {
        auto* handle = new AsyncIOHandle(block_size, queue_depth, thread_count, use_direct_io != 0,
                                         single_submit != 0, overlap_events != 0);
        auto* object = reinterpret_cast<HandleObject*>(self);
        delete std::exchange(object->handle, handle);  // __init__ called again: the new settings
        Py_RETURN_NONE;
    });
    if (made == nullptr) return -1;
    Py_DECREF(made);
    return 0;
}

void handle_dealloc(PyObject* self) {
    delete reinterpret_cast<HandleObject*>(self)->handle;  // joins the workers, then drops the tensors
    PyTypeObject* type = Py_TYPE(self);
    auto free_object = reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free));
    free_object(self);
    Py_DECREF(type);  // a heap type: each instance holds a reference to it
}

using Transfer = std::int64_t (AsyncIOHandle::*)(PyObject*, PyObject*, PyObject*);

template <Transfer transfer>
PyObject* handle_transfer(PyObject* self, PyObject* args, PyObject* kwargs) {
    static const char* names[] = {"tensor", "file", "offset", nullptr};
    PyObject *tensor = nullptr, *file = nullptr, *offset = Py_None;
    if (PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O", const_cast<char**>(names), &tensor, &file, &offset) == 0) {
        return nullptr;
    }
    return for_python([&] { return PyLong_FromLongLong((handle_of(self).*transfer)(tensor, file, offset)); });
}

PyObject* handle_wait(PyObject* self, PyObject* /*unused*/) {
    return for_python([&] { return PyLong_FromLongLong(handle_of(self).wait()); });
}

PyObject* handle_stats(PyObject* self, PyObject* /*unused*/) {
    return for_python([&]() -> PyObject* {
        const auto counts = handle_of(self).stats();  // before the dict: an error leaves nothing behind
        Ref stats = aio_python::checked(PyDict_New());
        for (const auto& [name, count] : counts) {
            Ref value = aio_python::checked(PyLong_FromLongLong(count));
            if (PyDict_SetItemString(stats.get(), name, value.get()) < 0) throw PythonError{};
        }
        return stats.release();
    });
}

template <typename Value, Value (AsyncIOHandle::*setting)() const>
PyObject* handle_setting(PyObject* self, void* /*unused*/) {
    return for_python([&]() -> PyObject* {
        const Value value = (handle_of(self).*setting)();
        if constexpr (std::is_same_v<Value, bool>) return PyBool_FromLong(value ? 1 : 0);
        return PyLong_FromLongLong(static_cast<long long>(value));
    });
}

PyMethodDef handle_methods[] = {
    {"async_pwrite", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                         &handle_transfer<&AsyncIOHandle::async_pwrite>)),
     METH_VARARGS | METH_KEYWORDS,
     "async_pwrite(tensor, file, offset=None)\n--\n\n"
     "Queue a write of the tensor's bytes to a path or descriptor; returns the byte count."},
    {"async_pread", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                        &handle_transfer<&AsyncIOHandle::async_pread>)),
     METH_VARARGS | METH_KEYWORDS,
     "async_pread(tensor, file, offset=None)\n--\n\n"
     "Queue a read of a path or descriptor into the tensor; returns the byte count."},
    {"wait", handle_wait, METH_NOARGS,
     "Wait for every queued operation; returns how many completed, raises OSError on I/O errors."},
    {"sync_pwrite", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                        &handle_transfer<&AsyncIOHandle::sync_pwrite>)),
     METH_VARARGS | METH_KEYWORDS,
     "sync_pwrite(tensor, file, offset=None)\n--\n\nWrite the tensor's bytes and wait; returns the byte count."},
    {"sync_pread", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                       &handle_transfer<&AsyncIOHandle::sync_pread>)),
     METH_VARARGS | METH_KEYWORDS,
     "sync_pread(tensor, file, offset=None)\n--\n\nRead into the tensor and wait; returns the byte count."},
    {"stats", handle_stats, METH_NOARGS, "Counters of what the AIO contexts did so far."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef handle_settings[] = {
    {"block_size", handle_setting<std::int64_t, &AsyncIOHandle::block_size>, nullptr, nullptr, nullptr},
    {"queue_depth", handle_setting<int, &AsyncIOHandle::queue_depth>, nullptr, nullptr, nullptr},
    {"thread_count", handle_setting<int, &AsyncIOHandle::thread_count>, nullptr, nullptr, nullptr},
    {"use_direct_io", handle_setting<bool, &AsyncIOHandle::use_direct_io>, nullptr, nullptr, nullptr},
    {"single_submit", handle_setting<bool, &AsyncIOHandle::single_submit>, nullptr, nullptr, nullptr},
    {"overlap_events", handle_setting<bool, &AsyncIOHandle::overlap_events>, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot handle_slots[] = {
    {Py_tp_doc, const_cast<char*>(
                    "AsyncIOHandle(block_size=1048576, queue_depth=32, thread_count=1, use_direct_io=False, "
                    "single_submit=False, overlap_events=True)\n--\n\n"
                    "Reads and writes of CPU tensors to files through Linux AIO.")},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_init, reinterpret_cast<void*>(handle_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(handle_dealloc)},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_settings},
    {0, nullptr},
};

PyType_Spec handle_spec = {AIO_STRINGIZE(TORCH_EXTENSION_NAME) ".AsyncIOHandle",
                           static_cast<int>(sizeof(HandleObject)), 0, Py_TPFLAGS_DEFAULT, handle_slots};

PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, AIO_STRINGIZE(TORCH_EXTENSION_NAME),
    "Asynchronous tensor reads and writes to files through Linux AIO (libaio)",
    -1, nullptr, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

extern "C" PyMODINIT_FUNC AIO_PYINIT(TORCH_EXTENSION_NAME)(void) {
    Ref module(PyModule_Create(&module_definition));
    if (module.get() == nullptr) return nullptr;
    Ref type(PyType_FromSpec(&handle_spec));
    if (type.get() == nullptr || PyModule_AddObjectRef(module.get(), "AsyncIOHandle", type.get()) < 0 ||
        PyModule_AddIntConstant(module.get(), "DIRECT_IO_ALIGNMENT", aio::kDirectAlignment) < 0) {
        return nullptr;
    }
    return module.release();
}
