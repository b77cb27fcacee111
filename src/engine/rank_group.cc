#include "engine/rank_group.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4 {
namespace {

class LocalCollective final : public ops::Collective {
  public:
    LocalCollective(LocalRankGroup& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return group_.size(); }
    void all_reduce_sum(float* x, int64_t n) override {
        if (failed_.is_ok() && !group_.all_reduce_sum(rank_, x, n)) failed_ = group_.why_failed();
    }
    std::string shared_once(const std::function<std::string()>& make) override {
        return group_.shared_once(make);
    }
    Status status() const override { return failed_; }

  private:
    LocalRankGroup& group_;
    int rank_;
    Status failed_ = Status::ok();  // why this rank's sums stopped (a rank left)
};

}  // namespace

LocalRankGroup::LocalRankGroup(int ranks)
    : n_(ranks),
      data_(static_cast<size_t>(ranks)),
      lengths_(static_cast<size_t>(ranks)),
      scratch_(static_cast<size_t>(ranks)) {
    for (int r = 0; r < ranks; ++r) views_.push_back(std::make_unique<LocalCollective>(*this, r));
}

bool LocalRankGroup::barrier() {
    std::unique_lock<std::mutex> lock(m_);
    if (left_ >= 0) return false;
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
        return true;
    }
    cv_.wait(lock, [&] { return generation_ != gen || left_ >= 0; });
    return generation_ != gen;  // (complete, even if a rank left right after)
}

void LocalRankGroup::leave(int rank) {
    std::lock_guard<std::mutex> lock(m_);
    if (left_ < 0) left_ = rank;
    cv_.notify_all();
}

Status LocalRankGroup::why_failed() const {
    std::lock_guard<std::mutex> lock(m_);
    return error("rank ", left_, " left the group (its run ended or failed) while the others ran");
}

bool LocalRankGroup::all_reduce_sum(int rank, float* x, int64_t n) {
    {
        std::lock_guard<std::mutex> lock(m_);
        data_[static_cast<size_t>(rank)] = x;
        lengths_[static_cast<size_t>(rank)] = n;
    }
    if (!barrier()) return false;  // every rank's buffer is offered (or a rank left: x unchanged)
    for (int r = 0; r < n_; ++r)
        DSV4_ASSERT(lengths_[static_cast<size_t>(r)] == n, "all_reduce_sum: rank ", r, " sums ",
                    lengths_[static_cast<size_t>(r)], " floats, rank ", rank, " ", n);
    std::vector<float>& sum = scratch_[static_cast<size_t>(rank)];  // (grows once, then reused)
    sum.assign(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < n_; ++r) {
        const float* d = data_[static_cast<size_t>(r)];
        for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += d[i];
    }
    // Every rank has read every buffer: now each may overwrite its own. (No rank can leave
    // between the two barriers: every rank is inside this sum.)
    if (!barrier()) return false;
    std::copy(sum.begin(), sum.end(), x);
    return true;
}

std::string LocalRankGroup::shared_once(const std::function<std::string()>& make) {
    std::lock_guard<std::mutex> lock(m_);
    if (!shared_made_) {
        shared_ = make();
        shared_made_ = true;
    }
    return shared_;
}

RankGroup::RankGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RankGroup::~RankGroup() = default;

std::shared_ptr<RankGroup> RankGroup::in_process(int ranks) {
    DSV4_ASSERT(ranks >= 1, "RankGroup::in_process(", ranks, ")");
    return std::shared_ptr<RankGroup>(new RankGroup(std::make_unique<LocalRankGroup>(ranks)));
}

Expected<std::shared_ptr<RankGroup>> RankGroup::connect(int rank, int ranks,
                                                        const std::string& address,
                                                        double timeout_s) {
    if (ranks < 2 || rank < 0 || rank >= ranks)
        return error("rank ", rank, " of ", ranks, " ranks (0 <= rank < ranks, ranks >= 2)");
    DSV4_ASSIGN_OR_RETURN(auto impl, connect_tcp_rank_group(rank, ranks, address, timeout_s));
    return std::shared_ptr<RankGroup>(new RankGroup(std::move(impl)));
}

int RankGroup::size() const {
    return impl_->size();
}

Expected<std::string> RankGroup::broadcast(int rank, const std::string& value) {
    DSV4_ASSERT(rank >= 0 && rank < impl_->size() && impl_->collective(rank) != nullptr,
                "RankGroup::broadcast(", rank, "): not a rank of this process");
    // In process every rank's collective is here (their shared value is made once: not a
    // stream of values).
    if (impl_->all_here()) return error("broadcast: an in-process group (ranks as threads)");
    ops::Collective& c = *impl_->collective(rank);
    std::string v = c.shared_once([&] { return value; });
    DSV4_RETURN_IF_ERROR(c.status());
    return v;
}

void RankGroup::on_lost(std::function<void(const std::string& why)> lost, RankGroupWatch what) {
    impl_->on_lost(std::move(lost), what);
}

void RankGroup::leave(int rank) {
    DSV4_ASSERT(rank >= 0 && rank < impl_->size() && impl_->collective(rank) != nullptr,
                "RankGroup::leave(", rank, "): not a rank of this process");
    impl_->leave(rank);
}

}  // namespace dsv4
