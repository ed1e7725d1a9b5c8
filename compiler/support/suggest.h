// "Did you mean": the candidate nearest a misspelt name, for the front end's unknown names
// and the command lines' unknown flags.
#pragma once

#include <string>
#include <vector>

namespace modelc {

// Edits (insert, delete, replace, swap two neighbours) that turn a into b.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate within about a third of `name`'s length in edits, the nearest first; "" when
// none is that near (or `name` is one letter, too short for a guess to mean anything).
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace modelc
