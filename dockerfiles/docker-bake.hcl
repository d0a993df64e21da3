# The standard image matrix. Regenerate with `imagegen matrix`; do not edit by hand.
# Build from the repository root, with any builder (the docker driver's too), e.g.:
#   docker buildx bake -f dockerfiles/docker-bake.hcl cpu
# The bases are build arguments: --set cpu.args.BASE_DEVEL=mirror.example/python:3.11-slim-bookworm
# Export the layer cache (a docker-container, remote or kubernetes builder; not the docker driver):
#   CACHE_DIR=.cache/imagegen-bake docker buildx bake -f dockerfiles/docker-bake.hcl --builder NAME cpu
# `imagegen bake` builds targets of this matrix, verifies and pushes them (docs/imagegen.md).

variable "CACHE_DIR" {
  default = ""
}

group "default" {
  targets = ["cpu", "cuda12-1", "cuda12-4", "cuda12-6", "cuda12-8", "cuda13-0", "cuda13-2", "rocm6-2", "rocm6-4", "rocm7-2", "cpu-arm64", "cuda12-8-arm64", "cuda13-0-arm64", "cuda13-2-arm64"]
}

target "cpu" {
  context    = "."
  dockerfile = "dockerfiles/cpu/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cpu-torch2.13.0-py3.11-f576c8b0"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "python:3.11-slim-bookworm"
    BASE_RUNTIME = "python:3.11-slim-bookworm"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cpu"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cpu,mode=max"]
}

target "cuda12-1" {
  context    = "."
  dockerfile = "dockerfiles/cuda12.1/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda12.1-torch2.5.1-py3.10-d84ff604"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:12.1.1-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:12.1.1-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda12-1"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda12-1,mode=max"]
}

target "cuda12-4" {
  context    = "."
  dockerfile = "dockerfiles/cuda12.4/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda12.4-torch2.6.0-py3.10-d84ff604"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:12.4.1-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:12.4.1-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda12-4"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda12-4,mode=max"]
}

target "cuda12-6" {
  context    = "."
  dockerfile = "dockerfiles/cuda12.6/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda12.6-torch2.12.1-py3.10-d84ff604"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:12.6.3-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:12.6.3-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda12-6"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda12-6,mode=max"]
}

target "cuda12-8" {
  context    = "."
  dockerfile = "dockerfiles/cuda12.8/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda12.8-torch2.11.0-py3.10-cb15cb2f"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:12.8.1-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:12.8.1-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda12-8"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda12-8,mode=max"]
}

target "cuda13-0" {
  context    = "."
  dockerfile = "dockerfiles/cuda13.0/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda13.0-torch2.15.0-py3.10-301bbbca"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:13.0.0-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:13.0.0-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda13-0"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda13-0,mode=max"]
}

target "cuda13-2" {
  context    = "."
  dockerfile = "dockerfiles/cuda13.2/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda13.2-torch2.15.0-py3.12-92c69cf8"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:13.2.2-devel-ubuntu24.04"
    BASE_RUNTIME = "nvidia/cuda:13.2.2-base-ubuntu24.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda13-2"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda13-2,mode=max"]
}

target "rocm6-2" {
  context    = "."
  dockerfile = "dockerfiles/rocm6.2/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:rocm6.2-torch2.7.1-py3.10-51550ff0"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "rocm/dev-ubuntu-22.04:6.2"
    BASE_RUNTIME = "ubuntu:22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/rocm6-2"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/rocm6-2,mode=max"]
}

target "rocm6-4" {
  context    = "."
  dockerfile = "dockerfiles/rocm6.4/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:rocm6.4-torch2.9.1-py3.10-51550ff0"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "rocm/dev-ubuntu-22.04:6.4"
    BASE_RUNTIME = "ubuntu:22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/rocm6-4"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/rocm6-4,mode=max"]
}

target "rocm7-2" {
  context    = "."
  dockerfile = "dockerfiles/rocm7.2/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:rocm7.2-torch2.12.1-py3.12-51550ff0"]
  platforms  = ["linux/amd64"]
  args = {
    BASE_DEVEL = "rocm/dev-ubuntu-24.04:7.2"
    BASE_RUNTIME = "ubuntu:24.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/rocm7-2"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/rocm7-2,mode=max"]
}

target "cpu-arm64" {
  context    = "."
  dockerfile = "dockerfiles/cpu-arm64/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cpu-arm64-torch2.10.0-py3.11-f576c8b0"]
  platforms  = ["linux/arm64"]
  args = {
    BASE_DEVEL = "python:3.11-slim-bookworm"
    BASE_RUNTIME = "python:3.11-slim-bookworm"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cpu-arm64"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cpu-arm64,mode=max"]
}

target "cuda12-8-arm64" {
  context    = "."
  dockerfile = "dockerfiles/cuda12.8-arm64/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda12.8-arm64-torch2.11.0-py3.10-952b64aa"]
  platforms  = ["linux/arm64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:12.8.1-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:12.8.1-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda12-8-arm64"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda12-8-arm64,mode=max"]
}

target "cuda13-0-arm64" {
  context    = "."
  dockerfile = "dockerfiles/cuda13.0-arm64/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda13.0-arm64-torch2.15.0-py3.10-7342f416"]
  platforms  = ["linux/arm64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:13.0.0-devel-ubuntu22.04"
    BASE_RUNTIME = "nvidia/cuda:13.0.0-base-ubuntu22.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda13-0-arm64"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda13-0-arm64,mode=max"]
}

target "cuda13-2-arm64" {
  context    = "."
  dockerfile = "dockerfiles/cuda13.2-arm64/Dockerfile"
  target     = "runtime"
  tags       = ["imagegen:cuda13.2-arm64-torch2.15.0-py3.12-7342f416"]
  platforms  = ["linux/arm64"]
  args = {
    BASE_DEVEL = "nvidia/cuda:13.2.2-devel-ubuntu24.04"
    BASE_RUNTIME = "nvidia/cuda:13.2.2-base-ubuntu24.04"
  }
  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${CACHE_DIR}/cuda13-2-arm64"]
  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${CACHE_DIR}/cuda13-2-arm64,mode=max"]
}
