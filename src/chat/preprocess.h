// The reference's message preprocessing, step for step: tool results merged into user turns,
// tool results re-sorted into call order, and (thinking mode) old reasoning dropped.
#pragma once

#include <vector>

#include "dsv4/chat.h"

namespace dsv4::chat {

using Messages = std::vector<Json>;

// Iterating a Python value the way `for msg in messages` does: a list gives its items, an
// empty dict or string nothing; anything else cannot hold messages (error).
Expected<Messages> as_message_list(const Json& value, const char* what);

// merge_tool_messages: every user message becomes {"role": "user", "content", "content_blocks":
// [text block], task / wo_eos / mask when given}; "tool" messages become tool_result blocks of
// the user turn before them (or of a new one); consecutive user messages share one turn
// unless the earlier one carries a task.
Expected<Messages> merge_tool_messages(const Messages& messages);

// sort_tool_results_by_call_order, in place: a user turn with several tool results gets them
// in the order of the last assistant tool_calls before it (unknown ids first, stable).
Status sort_tool_results_by_call_order(std::vector<Json*>& messages);

// _drop_thinking_messages: before the last user/developer message, assistant turns lose their
// reasoning_content and every role other than user, system, tool, latest_reminder and
// direct_search_results is deleted.
Expected<Messages> drop_thinking_messages(const Messages& messages);

// Index of the last user or developer message, -1 if none.
long find_last_user_index(const Messages& messages);

}  // namespace dsv4::chat
