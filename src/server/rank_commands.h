// What rank 0 of a server split over processes (dsv4 serve --ranks N --rank R --rendezvous:
// docs/server.md) sends its other ranks through RankGroup::broadcast, one command at a time in
// the order its engine does them, so every rank's engine takes the same requests (under the
// same ids), cancellations and steps, and their collectives meet. JSON: {"op": "submit", "id",
// "request": {...}}, {"op": "cancel", "id"}, {"op": "step"}, {"op": "stop"}.
#pragma once

#include <string>
#include <utility>

#include "dsv4/engine.h"
#include "dsv4/status.h"

namespace dsv4::server {

struct RankCommand {
    enum class Op { kSubmit, kCancel, kStep, kStop };
    Op op = Op::kStep;
    RequestId id = 0;  // kSubmit, kCancel
    Request request;   // kSubmit (no session: the server's requests have none)

    static RankCommand submit(RequestId id, Request r) {
        RankCommand c = of(Op::kSubmit, id);
        c.request = std::move(r);
        return c;
    }
    static RankCommand cancel(RequestId id) { return of(Op::kCancel, id); }
    static RankCommand step() { return of(Op::kStep, 0); }
    static RankCommand stop() { return of(Op::kStop, 0); }

  private:
    static RankCommand of(Op op, RequestId id) {
        RankCommand c;
        c.op = op;
        c.id = id;
        return c;
    }
};

std::string encode_rank_command(const RankCommand& c);
// An error for anything encode_rank_command cannot have written.
Expected<RankCommand> decode_rank_command(const std::string& text);

}  // namespace dsv4::server
