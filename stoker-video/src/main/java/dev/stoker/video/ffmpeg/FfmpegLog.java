package dev.stoker.video.ffmpeg;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentHashMap;

/**
 * FFmpeg's log, taken over by an {@code av_log_set_callback} upcall: messages of level {@code AV_LOG_ERROR} and
 * worse go to the {@link Demuxer} whose context logged them (FFmpeg passes the context as the first argument), so
 * that "File ended prematurely" or "moov atom not found" become part of that video's error instead of a line on
 * the service's stderr; messages of contexts Stoker does not know go to a {@link System.Logger}. Everything less
 * severe is dropped at once.
 *
 * <p>Threading: FFmpeg calls the callback from any thread (decoder threads too); the routing map is concurrent
 * and the upcall never throws into native code.
 */
final class FfmpegLog {
    private static final int LINE_BYTES = 512;
    private static final System.Logger LOGGER = System.getLogger("dev.stoker.video.ffmpeg");
    private static final ConcurrentHashMap<Long, Demuxer> OWNERS = new ConcurrentHashMap<>();
    private static volatile MethodHandle formatLine;

    private FfmpegLog() {}

    /** Installs the callback (once, from {@link Ffmpeg}'s constructor). */
    static void install(Ffmpeg ff, MethodHandle setCallback, MethodHandle formatLine2) throws Throwable {
        formatLine = formatLine2;
        MethodHandle target = MethodHandles.lookup().findStatic(FfmpegLog.class, "callback", MethodType.methodType(
                void.class, MemorySegment.class, int.class, MemorySegment.class, MemorySegment.class));
        MemorySegment stub = ff.linker.upcallStub(target, FunctionDescriptor.ofVoid(ValueLayout.ADDRESS,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS), Arena.global());
        setCallback.invokeExact(stub);
    }

    static void register(MemorySegment context, Demuxer owner) {
        if (!context.equals(MemorySegment.NULL)) OWNERS.put(context.address(), owner);
    }

    static void unregister(MemorySegment context) {
        if (!context.equals(MemorySegment.NULL)) OWNERS.remove(context.address());
    }

    // Upcall: void (*)(void *avcl, int level, const char *fmt, va_list vl). va_list is passed on as the pointer
    // the ABI hands us (x86-64 SysV: a pointer to __va_list_tag).
    @SuppressWarnings("unused")
    private static void callback(MemorySegment avcl, int level, MemorySegment fmt, MemorySegment vl) {
        if (level > AvField.Constant.AV_LOG_ERROR.value) return;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment line = arena.allocate(LINE_BYTES);
            MemorySegment printPrefix = arena.allocate(ValueLayout.JAVA_INT);
            printPrefix.set(ValueLayout.JAVA_INT, 0, 0);
            int n = (int) formatLine.invokeExact(avcl, level, fmt, vl, line, LINE_BYTES, printPrefix);
            if (n < 0) return;
            String text = line.getString(0, StandardCharsets.UTF_8).strip();
            if (text.isEmpty()) return;
            Demuxer owner = avcl.equals(MemorySegment.NULL) ? null : OWNERS.get(avcl.address());
            if (owner != null) owner.ffmpegError(text);
            else LOGGER.log(System.Logger.Level.WARNING, "FFmpeg: {0}", text);
        } catch (Throwable ignored) {
            // nothing may reach FFmpeg's stack
        }
    }
}
