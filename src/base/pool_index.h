// An index held from a pool of fixed entries (a cache slot, a snapshot buffer): move-only, and
// given back to the pool (Pool::release(int), which Pool makes visible to this class) when it
// is dropped or replaced.
#pragma once

namespace dsv4 {

template <class Pool>
class PoolIndex {
  public:
    PoolIndex() = default;
    PoolIndex(Pool* pool, int index) : pool_(pool), index_(index) {}
    PoolIndex(PoolIndex&& o) noexcept : pool_(o.pool_), index_(o.index_) { o.pool_ = nullptr; }
    PoolIndex& operator=(PoolIndex&& o) noexcept {
        if (this != &o) {
            if (pool_) pool_->release(index_);
            pool_ = o.pool_;
            index_ = o.index_;
            o.pool_ = nullptr;
        }
        return *this;
    }
    PoolIndex(const PoolIndex&) = delete;
    PoolIndex& operator=(const PoolIndex&) = delete;
    ~PoolIndex() {
        if (pool_) pool_->release(index_);
    }
    int index() const { return index_; }
    bool held() const { return pool_ != nullptr; }

  private:
    Pool* pool_ = nullptr;
    int index_ = -1;
};

}  // namespace dsv4
