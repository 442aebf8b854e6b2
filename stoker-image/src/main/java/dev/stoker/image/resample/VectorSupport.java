package dev.stoker.image.resample;

/**
 * Whether this JVM has the JDK's Vector API: started with {@code --add-modules=jdk.incubator.vector}, as the launcher,
 * the release's launcher and the tests' JVM flags start it. The resizers then sum their taps with {@link VectorResample};
 * in a JVM without it they keep their scalar sweeps, which give the same bytes. This class names no Vector API type, so
 * it loads in either JVM.
 */
public final class VectorSupport {
    /** Source rows per horizontal strip of the resizers: every lane count below divides it. */
    public static final int STRIP_ROWS = 64;

    /** {@code -Dstoker.vector=off} keeps the scalar sweeps in a JVM that has the module (to compare the two, or to rule the Vector API out). */
    public static final String SWITCH = "stoker.vector";

    private static final boolean AVAILABLE = !"off".equals(System.getProperty(SWITCH))
            && ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent()
            && STRIP_ROWS % VectorResample.LANES == 0;

    private VectorSupport() {}

    /** True when the module is in this JVM, its preferred int vector divides a strip, and {@value #SWITCH} is not {@code off}. */
    public static boolean available() {
        return AVAILABLE;
    }

    /** Ints per vector here (16 with AVX-512, 8 with AVX2); 1 without the Vector API. */
    public static int lanes() {
        return AVAILABLE ? VectorResample.LANES : 1;
    }
}
