// Names for the numbers the CUDA driver API (CUresult) and cuDNN (cudnnStatus_t) return.
#pragma once

#include <optional>
#include <string_view>

namespace cudafix::installer::probe {

[[nodiscard]] std::optional<std::string_view> cu_result_name(int code);
[[nodiscard]] std::optional<std::string_view> cudnn_status_name(int code);

}  // namespace cudafix::installer::probe
