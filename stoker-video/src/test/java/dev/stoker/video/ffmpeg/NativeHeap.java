package dev.stoker.video.ffmpeg;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Bytes the C heap holds now (glibc's {@code mallinfo2}: in-use ordinary blocks plus mmap'd ones): what FFmpeg's
 * {@code av_malloc} takes, so a test can see a context or buffer left behind.
 */
public final class NativeHeap {
    private static final StructLayout MALLINFO2 = MemoryLayout.structLayout(
            ValueLayout.JAVA_LONG.withName("arena"), ValueLayout.JAVA_LONG.withName("ordblks"),
            ValueLayout.JAVA_LONG.withName("smblks"), ValueLayout.JAVA_LONG.withName("hblks"),
            ValueLayout.JAVA_LONG.withName("hblkhd"), ValueLayout.JAVA_LONG.withName("usmblks"),
            ValueLayout.JAVA_LONG.withName("fsmblks"), ValueLayout.JAVA_LONG.withName("uordblks"),
            ValueLayout.JAVA_LONG.withName("fordblks"), ValueLayout.JAVA_LONG.withName("keepcost"));
    private static final MethodHandle MALLINFO2_FN = Linker.nativeLinker().downcallHandle(
            Linker.nativeLinker().defaultLookup().findOrThrow("mallinfo2"), FunctionDescriptor.of(MALLINFO2));

    private NativeHeap() {}

    public static long inUseBytes() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment info = (MemorySegment) MALLINFO2_FN.invokeExact((java.lang.foreign.SegmentAllocator) arena);
            return info.get(ValueLayout.JAVA_LONG, MALLINFO2.byteOffset(MemoryLayout.PathElement.groupElement("uordblks")))
                    + info.get(ValueLayout.JAVA_LONG, MALLINFO2.byteOffset(MemoryLayout.PathElement.groupElement("hblkhd")));
        } catch (Throwable t) {
            throw new IllegalStateException("mallinfo2 failed", t);
        }
    }
}
