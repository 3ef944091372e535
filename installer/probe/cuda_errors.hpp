// Names for the numbers the CUDA driver API (CUresult) and cuDNN (cudnnStatus_t) return.
#pragma once

#include <optional>
#include <string_view>

namespace cudafix::installer::probe {

[[nodiscard]] std::optional<std::string_view> cu_result_name(int code);
[[nodiscard]] std::optional<std::string_view> cudnn_status_name(int code);
// ncclResult_t (nccl.h, stable since NCCL 2.0; ncclInProgress since 2.14).
[[nodiscard]] std::optional<std::string_view> nccl_result_name(int code);

}  // namespace cudafix::installer::probe
