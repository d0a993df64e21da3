# The standard image matrix. Regenerate with `imagegen matrix`; do not edit by hand.
# Build from the repository root, e.g.: docker buildx bake -f dockerfiles/docker-bake.hcl cpu

variable "CACHE_DIR" {
  default = ".cache/imagegen-bake"
}

group "default" {
  targets = ["cpu", "cuda12-1", "cuda12-4", "cuda12-6", "cuda12-8", "cuda13-0", "cuda13-2", "rocm6-2", "rocm6-4", "rocm7-2", "cpu-arm64", "cuda12-8-arm64", "cuda13-0-arm64", "cuda13-2-arm64"]
}

target "_common" {
  context = "."
  target  = "runtime"
}

target "cpu" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cpu/Dockerfile"
  tags       = ["imagegen:cpu-torch2.13.0-py3.11-f576c8b0"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cpu"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cpu,mode=max"]
}

target "cuda12-1" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda12.1/Dockerfile"
  tags       = ["imagegen:cuda12.1-torch2.5.1-py3.10-d84ff604"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda12-1"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda12-1,mode=max"]
}

target "cuda12-4" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda12.4/Dockerfile"
  tags       = ["imagegen:cuda12.4-torch2.6.0-py3.10-d84ff604"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda12-4"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda12-4,mode=max"]
}

target "cuda12-6" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda12.6/Dockerfile"
  tags       = ["imagegen:cuda12.6-torch2.9.1-py3.10-d84ff604"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda12-6"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda12-6,mode=max"]
}

target "cuda12-8" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda12.8/Dockerfile"
  tags       = ["imagegen:cuda12.8-torch2.9.1-py3.10-cb15cb2f"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda12-8"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda12-8,mode=max"]
}

target "cuda13-0" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda13.0/Dockerfile"
  tags       = ["imagegen:cuda13.0-torch2.9.1-py3.10-301bbbca"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda13-0"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda13-0,mode=max"]
}

target "cuda13-2" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda13.2/Dockerfile"
  tags       = ["imagegen:cuda13.2-torch2.15.0-py3.12-92c69cf8"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda13-2"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda13-2,mode=max"]
}

target "rocm6-2" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/rocm6.2/Dockerfile"
  tags       = ["imagegen:rocm6.2-torch2.7.1-py3.10-51550ff0"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/rocm6-2"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/rocm6-2,mode=max"]
}

target "rocm6-4" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/rocm6.4/Dockerfile"
  tags       = ["imagegen:rocm6.4-torch2.9.1-py3.10-51550ff0"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/rocm6-4"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/rocm6-4,mode=max"]
}

target "rocm7-2" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/rocm7.2/Dockerfile"
  tags       = ["imagegen:rocm7.2-torch2.12.1-py3.12-51550ff0"]
  platforms  = ["linux/amd64"]
  cache-from = ["type=local,src=${CACHE_DIR}/rocm7-2"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/rocm7-2,mode=max"]
}

target "cpu-arm64" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cpu-arm64/Dockerfile"
  tags       = ["imagegen:cpu-arm64-torch2.13.0-py3.11-f576c8b0"]
  platforms  = ["linux/arm64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cpu-arm64"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cpu-arm64,mode=max"]
}

target "cuda12-8-arm64" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda12.8-arm64/Dockerfile"
  tags       = ["imagegen:cuda12.8-arm64-torch2.9.1-py3.10-952b64aa"]
  platforms  = ["linux/arm64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda12-8-arm64"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda12-8-arm64,mode=max"]
}

target "cuda13-0-arm64" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda13.0-arm64/Dockerfile"
  tags       = ["imagegen:cuda13.0-arm64-torch2.9.1-py3.10-7342f416"]
  platforms  = ["linux/arm64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda13-0-arm64"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda13-0-arm64,mode=max"]
}

target "cuda13-2-arm64" {
  inherits   = ["_common"]
  dockerfile = "dockerfiles/cuda13.2-arm64/Dockerfile"
  tags       = ["imagegen:cuda13.2-arm64-torch2.15.0-py3.12-7342f416"]
  platforms  = ["linux/arm64"]
  cache-from = ["type=local,src=${CACHE_DIR}/cuda13-2-arm64"]
  cache-to   = ["type=local,dest=${CACHE_DIR}/cuda13-2-arm64,mode=max"]
}
