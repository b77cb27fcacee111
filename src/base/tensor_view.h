// A non-owning view of a tensor: pointer, dtype, shape and strides (in elements), row-major
// by default. Backends use it at op boundaries to check what they are handed.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/check.h"
#include "base/dtype.h"

namespace dsv4 {

inline constexpr int kMaxDims = 6;

struct Shape {
    int ndim = 0;
    std::array<int64_t, kMaxDims> dims{};

    Shape() = default;
    Shape(std::initializer_list<int64_t> d) {
        DSV4_ASSERT(d.size() <= kMaxDims, "too many dims: ", d.size());
        for (int64_t v : d) dims[ndim++] = v;
    }
    int64_t operator[](int i) const {
        DSV4_DASSERT(i >= 0 && i < ndim, "dim ", i, " of ", ndim);
        return dims[i];
    }
    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= dims[i];
        return n;
    }
    bool operator==(const Shape& o) const {
        if (ndim != o.ndim) return false;
        for (int i = 0; i < ndim; ++i)
            if (dims[i] != o.dims[i]) return false;
        return true;
    }
    std::string str() const {
        std::string s = "[";
        for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
        return s + "]";
    }
};

struct TensorView {
    void* data = nullptr;
    DType dtype = DType::kF32;
    Shape shape;
    std::array<int64_t, kMaxDims> strides{};

    TensorView() = default;
    TensorView(void* d, DType t, Shape s) : data(d), dtype(t), shape(s) {
        int64_t st = 1;
        for (int i = s.ndim - 1; i >= 0; --i) {
            strides[i] = st;
            st *= s.dims[i];
        }
    }
    int64_t numel() const { return shape.numel(); }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
    bool is_contiguous() const {
        int64_t st = 1;
        for (int i = shape.ndim - 1; i >= 0; --i) {
            if (shape.dims[i] != 1 && strides[i] != st) return false;
            st *= shape.dims[i];
        }
        return true;
    }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data);
    }
};

}  // namespace dsv4
