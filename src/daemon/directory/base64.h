// Base64 (RFC 4648, standard alphabet, with padding), as etcd's JSON gateway wants keys and
// values.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vrdma::daemon {

std::string base64_encode(std::string_view bytes);

// nullopt for text that is not padded base64 of the standard alphabet.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace vrdma::daemon
