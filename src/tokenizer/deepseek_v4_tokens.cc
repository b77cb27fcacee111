// DeepSeek-V4's added-token table (FORMATS.md §4.1). Ids are verified for V4 for BOS/EOS,
// User/Assistant, think, DSML, latest_reminder, the task tokens used by the chat encoding and
// <｜image｜>; the remaining names come from a V4.1 port's full table and agree with every
// verified id. Flags follow DeepSeek's V3 file: BOS/EOS/pad/place holders are `special` and
// matched before normalization, text-level markers (roles, think, DSML, tasks) are not
// `special`, so they are found even with parse_special=false, as in V3 for <｜User｜>.
#include "dsv4/tokenizer.h"

namespace dsv4 {

std::vector<AddedToken> deepseek_v4_added_tokens() {
    std::vector<AddedToken> t;
    auto special = [&](int32_t id, std::string content) {
        t.push_back(AddedToken{id, std::move(content), true, false, false, false, false});
    };
    auto marker = [&](int32_t id, std::string content) {
        t.push_back(AddedToken{id, std::move(content), false, true, false, false, false});
    };
    special(0, "<｜begin▁of▁sentence｜>");
    special(1, "<｜end▁of▁sentence｜>");
    special(2, "<｜▁pad▁｜>");
    for (int k = 0; k < 799; ++k)
        special(128000 + k, "<｜place▁holder▁no▁" + std::to_string(k) + "｜>");
    const char* const markers[] = {
        "<｜System｜>",                            // 128799
        "<｜fim▁hole｜>",                          // 128800
        "<｜fim▁begin｜>",                         // 128801
        "<｜fim▁end｜>",                           // 128802
        "<｜User｜>",                              // 128803
        "<｜Assistant｜>",                         // 128804
        nullptr,                                   // 128805 <|EOT|>, special (below)
        "<｜tool▁calls▁begin｜>",                  // 128806
        "<｜tool▁calls▁end｜>",                    // 128807
        "<｜tool▁call▁begin｜>",                   // 128808
        "<｜tool▁call▁end｜>",                     // 128809
        "<｜tool▁outputs▁begin｜>",                // 128810
        "<｜tool▁outputs▁end｜>",                  // 128811
        "<｜tool▁output▁begin｜>",                 // 128812
        "<｜tool▁output▁end｜>",                   // 128813
        "<｜tool▁sep｜>",                          // 128814
        "<｜begin▁of▁repo▁name｜>",                // 128815
        "<｜end▁of▁repo▁name｜>",                  // 128816
        "<｜begin▁of▁file▁name｜>",                // 128817
        "<｜end▁of▁file▁name｜>",                  // 128818
        "<｜begin▁of▁file｜>",                     // 128819
        "<｜end▁of▁file｜>",                       // 128820
        "<think>",                                 // 128821
        "</think>",                                // 128822
        "<｜place▁holder▁for▁copy｜>",             // 128823
        "<｜place▁holder▁for▁pointer▁replace｜>",  // 128824
        "｜DSML｜",                                // 128825
        "<｜begin▁sys｜>",                         // 128826
        "<｜end▁sys｜>",                           // 128827
        "<｜latest_reminder｜>",                   // 128828
        "<｜action｜>",                            // 128829
        "<｜query｜>",                             // 128830
        "<｜authority｜>",                         // 128831
        "<｜domain｜>",                            // 128832
        "<｜task｜>",                              // 128833
        "<｜political｜>",                         // 128834
        "<｜entity｜>",                            // 128835
        "<｜title｜>",                             // 128836
        "<｜safety｜>",                            // 128837
        "<｜answer｜>",                            // 128838
        "<｜search｜>",                            // 128839
        "<dsml:",                                  // 128840
        "</dsml:",                                 // 128841
        "<｜search▁begin｜>",                      // 128842
        "<｜search▁end｜>",                        // 128843
        "<｜extracted_url｜>",                     // 128844
        "<｜read_url｜>",                          // 128845
    };
    int32_t id = 128799;
    for (const char* content : markers) {
        if (content == nullptr) {
            t.push_back(AddedToken{id, "<|EOT|>", true, true, false, false, false});
        } else {
            marker(id, content);
        }
        ++id;
    }
    special(128846, "<｜end_of_query｜>");
    special(129279, "<｜image｜>");
    return t;
}

}  // namespace dsv4
