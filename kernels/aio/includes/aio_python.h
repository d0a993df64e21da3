// What async_io's binding needs of Python, through its C API alone (the limited API in a stable
// build: Py_LIMITED_API comes from op_builder), so that the module links against no torch and no
// particular CPython: references, raising, the GIL, paths, and a tensor's bytes read through its
// Python attributes.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

namespace aio_python {

// A Python exception is set: unwind to the binding, which returns NULL (or -1) to Python.
struct PythonError {};

// Owns one reference (or none).
class Ref {
   public:
    explicit Ref(PyObject* owned = nullptr) : object_(owned) {}
    static Ref borrowed(PyObject* object) {
        Py_XINCREF(object);
        return Ref(object);
    }
    Ref(Ref&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
    Ref& operator=(Ref&& other) noexcept {
        std::swap(object_, other.object_);
        return *this;
    }
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    ~Ref() { Py_XDECREF(object_); }

    PyObject* get() const { return object_; }
    PyObject* release() { return std::exchange(object_, nullptr); }

   private:
    PyObject* object_;
};

// A new reference from the C API, or PythonError when it failed (and set the exception).
inline Ref checked(PyObject* result) {
    if (result == nullptr) throw PythonError{};
    return Ref(result);
}

[[noreturn]] inline void raise(PyObject* type, const std::string& message) {
    PyErr_SetString(type, message.c_str());
    throw PythonError{};
}

// Text of the file system's encoding (a path's bytes, and messages that hold one) as str: bytes
// that are not UTF-8 come through as Python's os.fsdecode gives them.
inline Ref fs_text(const std::string& bytes) {
    return checked(PyUnicode_DecodeFSDefaultAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size())));
}

// Raise OSError(errno, message, path); Python picks the subclass from errno
// (FileNotFoundError for ENOENT, PermissionError for EACCES, ...). A descriptor has
// no file name (empty path), as with os.fstat.
[[noreturn]] inline void raise_os_error(int err, const std::string& message, const std::string& path) {
    Ref name = path.empty() ? Ref::borrowed(Py_None) : fs_text(path);
    Ref text = fs_text(message);
    Ref error = checked(PyObject_CallFunction(PyExc_OSError, "iOO", err, text.get(), name.get()));
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.get())), error.get());
    throw PythonError{};
}

// The GIL released for this scope (nothing in it may touch a Python object).
class GilReleased {
   public:
    GilReleased() : state_(PyEval_SaveThread()) {}
    ~GilReleased() { PyEval_RestoreThread(state_); }
    GilReleased(const GilReleased&) = delete;
    GilReleased& operator=(const GilReleased&) = delete;

   private:
    PyThreadState* state_;
};

// str, bytes or os.PathLike -> the file system's bytes for the name (as os.fsencode).
inline std::string fs_path(PyObject* path) {
    PyObject* converted = nullptr;
    if (PyUnicode_FSConverter(path, &converted) == 0) throw PythonError{};
    Ref bytes(converted);
    char* data = nullptr;
    Py_ssize_t size = 0;
    if (PyBytes_AsStringAndSize(bytes.get(), &data, &size) < 0) throw PythonError{};
    return std::string(data, static_cast<size_t>(size));
}

inline std::int64_t as_int64(PyObject* number) {
    const long long value = PyLong_AsLongLong(number);
    if (value == -1 && PyErr_Occurred() != nullptr) throw PythonError{};
    return static_cast<std::int64_t>(value);
}

inline int as_descriptor(PyObject* number) {
    const std::int64_t value = as_int64(number);
    if (value < INT_MIN || value > INT_MAX) {
        raise(PyExc_OverflowError, "async_io: file descriptor " + std::to_string(value) + " is out of range");
    }
    return static_cast<int>(value);
}

inline std::string utf8(PyObject* text) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(text, &size);
    if (data == nullptr) throw PythonError{};
    return std::string(data, static_cast<size_t>(size));
}

// str(object), as UTF-8.
inline std::string str(PyObject* object) { return utf8(checked(PyObject_Str(object)).get()); }

struct TensorBytes {
    char* data;
    std::int64_t nbytes;
};

// torch.Tensor, looked up on first use (its front has imported torch by then), with the GIL held.
inline PyObject* tensor_type() {
    static PyObject* type = nullptr;  // kept for the process's life, as the module is
    if (type == nullptr) {
        Ref torch = checked(PyImport_ImportModule("torch"));
        type = checked(PyObject_GetAttrString(torch.get(), "Tensor")).release();
    }
    return type;
}

// The tensor attributes read on every call, as strings made once (interned) on first use, with
// the GIL held: a lookup by name string made per call cost ~0.3 us a name.
struct TensorNames {
    PyObject* is_cpu;
    PyObject* is_contiguous;
    PyObject* data_ptr;
    PyObject* nbytes;
};

inline const TensorNames& tensor_names() {
    static const TensorNames names = {checked(PyUnicode_InternFromString("is_cpu")).release(),
                                      checked(PyUnicode_InternFromString("is_contiguous")).release(),
                                      checked(PyUnicode_InternFromString("data_ptr")).release(),
                                      checked(PyUnicode_InternFromString("nbytes")).release()};
    return names;
}

// object.name()
inline Ref call_method(PyObject* object, PyObject* name) {
    Ref method = checked(PyObject_GetAttr(object, name));
    return checked(PyObject_CallNoArgs(method.get()));
}

// Where a CPU, contiguous tensor's bytes are, and how many (numel * element_size); ValueError
// for another device or a strided tensor, TypeError for anything but a tensor.
inline TensorBytes cpu_tensor_bytes(PyObject* tensor) {
    const int is_tensor = PyObject_IsInstance(tensor, tensor_type());
    if (is_tensor < 0) throw PythonError{};
    if (is_tensor == 0) {
        Ref type_name = checked(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(tensor)), "__name__"));
        raise(PyExc_TypeError, "async_io: tensor must be a torch.Tensor, got " + utf8(type_name.get()));
    }
    const TensorNames& names = tensor_names();
    Ref is_cpu = checked(PyObject_GetAttr(tensor, names.is_cpu));  // one lookup; the device for the message
    if (is_cpu.get() != Py_True) {
        Ref device = checked(PyObject_GetAttrString(tensor, "device"));
        raise(PyExc_ValueError, "async_io: the tensor must be on the CPU, got " + str(device.get()));
    }
    Ref contiguous = call_method(tensor, names.is_contiguous);
    const int is_contiguous = PyObject_IsTrue(contiguous.get());
    if (is_contiguous < 0) throw PythonError{};
    if (is_contiguous == 0) raise(PyExc_ValueError, "async_io: the tensor must be contiguous");
    Ref address = call_method(tensor, names.data_ptr);
    void* data = PyLong_AsVoidPtr(address.get());
    if (data == nullptr && PyErr_Occurred() != nullptr) throw PythonError{};
    Ref nbytes = checked(PyObject_GetAttr(tensor, names.nbytes));
    return {static_cast<char*>(data), as_int64(nbytes.get())};
}

}  // namespace aio_python
