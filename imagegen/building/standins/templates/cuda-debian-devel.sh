# Run by `imagegen standins` in the CUDA 12.4 devel stand-in's container after apt (see
# imagegen/building/standins/debian_cuda.py for why each step). Arguments: the CUDA X.Y the toolkit must
# be, the multiarch triplet, the GCC major nvcc accepts, the CUDA tools to link. Fails, so the
# image is not committed, where the toolkit or the header is not what this was written for.
version="$1" triplet="$2" gcc="$3"
shift 3
nvcc --version | grep -q "release $version," || {
    echo "nvidia-cuda-toolkit is not CUDA $version:"
    nvcc --version
    exit 1
}
home=/usr/local/cuda
mkdir -p "$home/bin" "$home/nvvm" /usr/local/bin
for tool in "$@"; do ln -s "/usr/bin/$tool" "$home/bin/$tool"; done
ln -s /usr/include "$home/include"
ln -s "/usr/lib/$triplet" "$home/lib64"
ln -s /usr/lib/nvidia-cuda-toolkit/libdevice "$home/nvvm/libdevice"
for tool in gcc g++ cpp; do
    ln -s "/usr/bin/$tool-$gcc" "/usr/local/bin/$tool"
    [ "$tool" = cpp ] || ln -s "/usr/bin/$triplet-$tool-$gcc" "/usr/local/bin/$triplet-$tool"
done
ln -s "/usr/bin/gcc-$gcc" /usr/local/bin/cc
ln -s "/usr/bin/g++-$gcc" /usr/local/bin/c++
header=/usr/include/crt/math_functions.h
decl='^(extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ \w+ +(?:sinpi|cospi)f?\(\w+ x\));$'
perl -0pi -e "s/$decl/#if defined(__cplusplus)\n\$1 noexcept (true);\n#else\n\$1;\n#endif/mg" "$header"
[ "$(grep -c 'noexcept (true);' "$header")" -eq 4 ] || {
    echo "$header: expected 4 sinpi/cospi declarations to mend"
    exit 1
}
find "/usr/lib/$triplet" -maxdepth 1 -name 'lib*_static*.a' ! -name libcudart_static.a -delete
rm -f "/usr/lib/$triplet"/libcuda.so* "/usr/lib/$triplet"/nvidia/current/libcuda.so* \
    "/usr/lib/$triplet"/libnvidia-ml.so* "/usr/lib/$triplet"/libnvidia-ptxjitcompiler.so* \
    "/usr/lib/$triplet"/libnvidia-pkcs11*.so*
ldconfig
