package dev.stoker.image.torch;

/**
 * The x86-64 CPU capability that PyTorch's CPU kernels were dispatched to ({@code torch.backends.cpu.get_cpu_capability()},
 * overridable with {@code ATEN_CPU_CAPABILITY}); it changes the float32 antialiased resize's results (correction 2 of
 * {@code vectors/qwen-vl-video/README.md}).
 *
 * <p>Why it matters: aten compiles its kernels once per capability. The AVX2 and AVX512 builds were compiled with FMA
 * contraction, so {@code a·b+c} in the cubic filter polynomial and in the tap loop is one fused, singly rounded
 * operation (except in the taps GCC vectorized as an in-order 4-lane reduction); the DEFAULT build fuses nothing. The
 * uint8 kernel ({@link TorchBicubicU8Resizer}) is integer arithmetic and identical at every capability.
 */
public enum CpuCapability {
    /** No SIMD build ({@code ATEN_CPU_CAPABILITY=default}): every product and sum rounded separately. */
    DEFAULT,
    /** The AVX2 build (what the vectors were made with): fused multiply-adds as in {@code fma32} of the reference. */
    AVX2,
    /** The AVX512 build: the same fusion as AVX2, measured identical (correction 2). */
    AVX512;

    /** Whether the build fused {@code a·b+c} into one FMA. */
    public boolean fusesMultiplyAdd() { return this != DEFAULT; }

    /** Parses {@code default}, {@code avx2} or {@code avx512} (what {@code get_cpu_capability()} prints, any case). */
    public static CpuCapability parse(String name) {
        return switch (name.toLowerCase(java.util.Locale.ROOT)) {
            case "default" -> DEFAULT;
            case "avx2" -> AVX2;
            case "avx512" -> AVX512;
            default -> throw new IllegalArgumentException("unknown CPU capability '" + name + "' (default, avx2, avx512)");
        };
    }
}
