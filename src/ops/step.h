// The step descriptor: one forward step runs B rows; a row is a run of len tokens of one
// sequence at consecutive positions pos0.. in cache slot `slot` (a decode row has len 1, a
// prefill chunk more). The arrays live in backend memory, written once per step before the
// ops run; every op reads positions, slots and chunk offsets from there, so the host-side
// arguments of a step do not depend on where the sequences are (a CUDA graph can replay it).
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::ops {

struct StepDesc {
    const int32_t* ids = nullptr;        // [T] token ids, row after row
    const int32_t* tok_row = nullptr;    // [T] row of each token
    const int64_t* tok_pos = nullptr;    // [T] absolute position of each token
    const int32_t* row_slot = nullptr;   // [B] cache slot of each row
    const int32_t* row_start = nullptr;  // [B] index of the row's first token in [0, T)
    const int32_t* row_len = nullptr;    // [B] tokens of the row in this step
    const int64_t* row_pos0 = nullptr;   // [B] position of the row's first token
    int T = 0, B = 0;
};

// Host arrays of a step descriptor: the model fills one and uploads each array; CPU tests
// point a StepDesc straight at them (host memory is the CPU backend's memory).
struct HostStep {
    std::vector<int32_t> ids, tok_row, row_slot, row_start, row_len;
    std::vector<int64_t> tok_pos, row_pos0;

    // Appends a row; ids may be nullptr (zeros) for ops that do not read them.
    void add_row(int32_t slot, int64_t pos0, int32_t len, const int32_t* row_ids = nullptr) {
        const int32_t row = static_cast<int32_t>(row_slot.size());
        row_slot.push_back(slot);
        row_start.push_back(static_cast<int32_t>(ids.size()));
        row_len.push_back(len);
        row_pos0.push_back(pos0);
        for (int32_t i = 0; i < len; ++i) {
            ids.push_back(row_ids ? row_ids[i] : 0);
            tok_row.push_back(row);
            tok_pos.push_back(pos0 + i);
        }
    }
    void clear() { *this = HostStep{}; }
    int T() const { return static_cast<int>(ids.size()); }
    int B() const { return static_cast<int>(row_slot.size()); }
    StepDesc view() const {
        return {ids.data(),       tok_row.data(), tok_pos.data(), row_slot.data(),
                row_start.data(), row_len.data(), row_pos0.data(), T(),
                B()};
    }
};

}  // namespace dsv4::ops
