package dev.stoker.video.ffmpeg;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.List;

/**
 * One open container: an AVFormatContext reading through a custom AVIOContext whose {@code read_packet} and
 * {@code seek} are FFM upcalls into a {@link SeekableByteSource}, the best video stream (or, through
 * {@link #openAudio}, the best audio stream) chosen, and packets read one at a time without decoding.
 *
 * <p>Upcalls never let a Java exception reach FFmpeg (that would end the JVM): a failed read is kept, FFmpeg gets
 * {@code AVERROR(EIO)}, and the next call on this demuxer rethrows it naming the video. Past the deadline a read
 * returns {@code AVERROR_EXIT}, so a probe or a packet loop that stalls inside FFmpeg stops at the next read.
 *
 * <p>Threading: one thread at a time; the upcall stubs live in this demuxer's shared arena, freed by {@link #close}.
 */
public final class Demuxer implements AutoCloseable {
    static final int AVIO_BUFFER_BYTES = 64 * 1024;
    /** More streams than any real container holds (MP4 track IDs are 32-bit, but files carry a handful). */
    static final int MAX_STREAMS = 4096;

    private static final MethodHandle READ_UPCALL;
    private static final MethodHandle SEEK_UPCALL;

    static {
        try {
            var lookup = MethodHandles.lookup();
            READ_UPCALL = lookup.findVirtual(Demuxer.class, "readPacket",
                    MethodType.methodType(int.class, MemorySegment.class, MemorySegment.class, int.class));
            SEEK_UPCALL = lookup.findVirtual(Demuxer.class, "seek",
                    MethodType.methodType(long.class, MemorySegment.class, long.class, int.class));
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final Ffmpeg ff;
    private final SeekableByteSource source;
    private final long deadlineNanos;
    /** AVMEDIA_TYPE_VIDEO or AVMEDIA_TYPE_AUDIO: the kind of stream chosen, and the word errors begin with. */
    private final int mediaType;
    private final String noun;
    private final Arena arena = Arena.ofShared();
    private final long sourceSizeBytes;
    private MemorySegment avio = MemorySegment.NULL;
    private MemorySegment format = MemorySegment.NULL;
    private MemorySegment allocatedFormat = MemorySegment.NULL;
    private MemorySegment registeredAvio = MemorySegment.NULL;
    private MemorySegment packet = MemorySegment.NULL;
    private MemorySegment stream = MemorySegment.NULL;
    private MemorySegment codecpar = MemorySegment.NULL;
    private int streamIndex = -1;
    private long positionBytes;
    private boolean pastDeadline;
    private Throwable readFailure;
    private boolean closed;
    private final java.util.List<String> ffmpegErrors = new java.util.ArrayList<>();
    private static final int MAX_FFMPEG_ERRORS = 8;

    /**
     * Opens {@code source} (the caller still owns and closes it) and chooses its best video stream; fails with a
     * {@link SampleException} naming the video when it has none or FFmpeg cannot read it.
     */
    public static Demuxer open(SeekableByteSource source, long deadlineNanos) {
        return open(source, deadlineNanos, Ffmpeg::get);
    }

    /**
     * Opens {@code source} and chooses its best audio stream (an audio file's, or a video's audio track); fails with
     * a {@link SampleException} beginning "audio NAME:" when it has none ("no audio track") or FFmpeg cannot read it.
     */
    public static Demuxer openAudio(SeekableByteSource source, long deadlineNanos) {
        return open(source, deadlineNanos, Ffmpeg::get, AvField.Constant.AVMEDIA_TYPE_AUDIO.value);
    }

    /** As {@link #open(SeekableByteSource, long)}, with the libraries from {@code ffmpeg} (tests pass a failing one). */
    static Demuxer open(SeekableByteSource source, long deadlineNanos, java.util.function.Supplier<Ffmpeg> ffmpeg) {
        return open(source, deadlineNanos, ffmpeg, AvField.Constant.AVMEDIA_TYPE_VIDEO.value);
    }

    static Demuxer open(SeekableByteSource source, long deadlineNanos, java.util.function.Supplier<Ffmpeg> ffmpeg,
                        int mediaType) {
        String noun = mediaType == AvField.Constant.AVMEDIA_TYPE_AUDIO.value ? "audio" : "video";
        Ffmpeg ff;
        try {
            ff = ffmpeg.get();
        } catch (FfmpegUnavailableException e) {
            // the video's error, counted as one like any other; the message names the missing library
            throw new SampleException(source.name(), SampleException.Stage.DECODE,
                    noun + " " + source.name() + ": " + e.getMessage(), e);
        }
        long size;
        try {
            size = source.sizeBytes();
        } catch (IOException e) {
            throw new SampleException(source.name(), SampleException.Stage.DECODE,
                    noun + " " + source.name() + ": cannot read its size: " + e, e);
        }
        Demuxer d = new Demuxer(ff, source, size, deadlineNanos, mediaType, noun);
        try {
            d.openInput();
            return d;
        } catch (RuntimeException | Error e) {
            d.close();
            throw e;
        }
    }

    private Demuxer(Ffmpeg ff, SeekableByteSource source, long sourceSizeBytes, long deadlineNanos, int mediaType,
                    String noun) {
        this.ff = ff;
        this.mediaType = mediaType;
        this.noun = noun;
        this.source = source;
        this.sourceSizeBytes = sourceSizeBytes;
        this.deadlineNanos = deadlineNanos;
    }

    private void openInput() {
        try {
            MemorySegment readStub = ff.linker.upcallStub(READ_UPCALL.bindTo(this),
                    FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS,
                            ValueLayout.JAVA_INT), arena);
            MemorySegment seekStub = ff.linker.upcallStub(SEEK_UPCALL.bindTo(this),
                    FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG,
                            ValueLayout.JAVA_INT), arena);
            MemorySegment buffer = (MemorySegment) ff.avMalloc.invokeExact((long) AVIO_BUFFER_BYTES);
            if (buffer.equals(MemorySegment.NULL)) throw error("av_malloc of the read buffer failed", null);
            avio = (MemorySegment) ff.avioAllocContext.invokeExact(buffer, AVIO_BUFFER_BYTES, 0, MemorySegment.NULL,
                    readStub, MemorySegment.NULL, seekStub);
            if (avio.equals(MemorySegment.NULL)) {
                ff.avFreep.invokeExact(arena.allocateFrom(ValueLayout.ADDRESS, buffer));
                throw error("avio_alloc_context failed", null);
            }
            avio = avio.reinterpret(AvField.extentBytes("AVIOContext"));
            registeredAvio = avio;
            FfmpegLog.register(avio, this);
            MemorySegment ctx = (MemorySegment) ff.avformatAllocContext.invokeExact();
            if (ctx.equals(MemorySegment.NULL)) throw error("avformat_alloc_context failed", null);
            allocatedFormat = ctx;
            FfmpegLog.register(ctx, this);
            ctx = ctx.reinterpret(AvField.extentBytes("AVFormatContext"));
            AvField.AVFormatContext_pb.setPointer(ctx, avio);
            MemorySegment ctxRef = arena.allocateFrom(ValueLayout.ADDRESS, ctx);
            // On failure avformat_open_input frees the context and writes NULL back.
            int rc = (int) ff.avformatOpenInput.invokeExact(ctxRef, arena.allocateFrom(source.name()),
                    MemorySegment.NULL, MemorySegment.NULL);
            format = ctxRef.get(ValueLayout.ADDRESS, 0);
            if (!format.equals(MemorySegment.NULL)) format = format.reinterpret(AvField.extentBytes("AVFormatContext"));
            check(rc, "cannot open the container");
            rc = (int) ff.avformatFindStreamInfo.invokeExact(format, MemorySegment.NULL);
            check(rc, "cannot read the stream parameters");
            int best = (int) ff.avFindBestStream.invokeExact(format, mediaType, -1, -1, MemorySegment.NULL, 0);
            if (best == AvField.Constant.AVERROR_STREAM_NOT_FOUND.value) {
                throw error(mediaType == AvField.Constant.AVMEDIA_TYPE_AUDIO.value
                        ? "no audio track (" + AvField.AVFormatContext_nb_streams.getInt(format) + " streams, none audio)"
                        : "no video stream", null);
            }
            check(best, "cannot choose a " + noun + " stream");
            int nbStreams = AvField.AVFormatContext_nb_streams.getInt(format);
            if (nbStreams <= 0 || nbStreams > MAX_STREAMS || best >= nbStreams) {
                throw error("FFmpeg chose stream " + best + " of " + nbStreams, null);
            }
            // a NULL read through FFM would crash the JVM: every pointer is checked before it is followed
            MemorySegment streams = nonNull(AvField.AVFormatContext_streams.getPointer(format), "streams")
                    .reinterpret((long) nbStreams * ValueLayout.ADDRESS.byteSize());
            stream = nonNull(streams.getAtIndex(ValueLayout.ADDRESS, best), "stream")
                    .reinterpret(AvField.extentBytes("AVStream"));
            codecpar = nonNull(AvField.AVStream_codecpar.getPointer(stream), "codecpar")
                    .reinterpret(AvField.extentBytes("AVCodecParameters"));
            streamIndex = best;
            packet = nonNull((MemorySegment) ff.avPacketAlloc.invokeExact(), "av_packet_alloc's packet")
                    .reinterpret(AvField.extentBytes("AVPacket"));
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw error("FFmpeg call failed: " + t, t);
        }
    }

    private MemorySegment nonNull(MemorySegment pointer, String what) {
        if (pointer.equals(MemorySegment.NULL)) throw error("FFmpeg gave a NULL " + what, null);
        return pointer;
    }

    /** The source's name, for messages. */
    public String name() { return source.name(); }

    public int streamIndex() { return streamIndex; }

    /** The chosen AVStream (fields through {@link AvField}). */
    MemorySegment stream() { return stream; }

    MemorySegment codecParameters() { return codecpar; }

    Ffmpeg ffmpeg() { return ff; }

    /** The container format's short name ("mov,mp4,m4a,3gp,3g2,mj2", "avi", "matroska,webm"). */
    public String containerName() {
        MemorySegment iformat = nonNull(AvField.AVFormatContext_iformat.getPointer(format), "input format")
                .reinterpret(AvField.extentBytes("AVInputFormat"));
        return Ffmpeg.cString(AvField.AVInputFormat_name.getPointer(iformat));
    }

    /**
     * Reads the next packet of the chosen stream into the packet this demuxer holds (valid until the next call);
     * false at the end of the container. Packets of other streams are skipped.
     */
    public boolean nextPacket() {
        try {
            while (true) {
                ff.avPacketUnref.invokeExact(packet);
                int rc = (int) ff.avReadFrame.invokeExact(format, packet);
                if (rc == AvField.Constant.AVERROR_EOF.value && readFailure == null && !pastDeadline) return false;
                check(rc, "cannot read a packet");
                if (AvField.AVPacket_stream_index.getInt(packet) == streamIndex) return true;
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw error("FFmpeg call failed: " + t, t);
        }
    }

    /**
     * Moves the demuxer to the last keyframe of the chosen stream at or before {@code pts} (in the stream's time
     * base): {@code av_seek_frame} with {@code AVSEEK_FLAG_BACKWARD}. The decoder must be flushed after it.
     */
    void seekBackward(long pts) {
        try {
            int rc = (int) ff.avSeekFrame.invokeExact(format, streamIndex, pts,
                    AvField.Constant.AVSEEK_FLAG_BACKWARD.value);
            check(rc, "cannot seek to pts " + pts);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw error("FFmpeg call failed: " + t, t);
        }
    }

    /** The packet {@link #nextPacket} read. */
    MemorySegment packet() { return packet; }

    /** Whether the deadline passed (checked on every read FFmpeg makes). */
    public void checkDeadline() {
        if (System.nanoTime() - deadlineNanos > 0) {
            pastDeadline = true;
            throw error("deadline passed while demuxing", null);
        }
    }

    /** The display-matrix rotation in degrees (counter-clockwise, as av_display_rotation_get gives it), or NaN when none. */
    double rotationDegrees() {
        try (Arena local = Arena.ofConfined()) {
            MemorySegment size = local.allocate(ValueLayout.JAVA_LONG);
            MemorySegment matrix = (MemorySegment) ff.avStreamGetSideData.invokeExact(stream,
                    AvField.Constant.AV_PKT_DATA_DISPLAYMATRIX.value, size);
            if (matrix.equals(MemorySegment.NULL) || size.get(ValueLayout.JAVA_LONG, 0) < 36) return Double.NaN;
            return (double) ff.avDisplayRotationGet.invokeExact(matrix.reinterpret(36));
        } catch (Throwable t) {
            throw error("cannot read the rotation: " + t, t);
        }
    }

    private void check(int rc, String what) {
        if (readFailure != null) {
            throw error(what + ": reading the source failed: " + readFailure, readFailure);
        }
        if (pastDeadline) throw error("deadline passed while demuxing", null);
        if (rc < 0) {
            List<String> reported = ffmpegErrors();
            throw error(what + ": " + ff.errorText(rc) + (reported.isEmpty() ? "" : " (FFmpeg: "
                    + String.join("; ", reported) + ")"), null);
        }
    }

    /** An error FFmpeg logged for this video's contexts ({@link FfmpegLog}); the first few are kept. */
    void ffmpegError(String message) {
        synchronized (ffmpegErrors) {
            if (ffmpegErrors.size() < MAX_FFMPEG_ERRORS) ffmpegErrors.add(message);
        }
    }

    /** The errors FFmpeg logged while reading this video, oldest first: a demuxer that logs one read damaged data. */
    public List<String> ffmpegErrors() {
        synchronized (ffmpegErrors) {
            return List.copyOf(ffmpegErrors);
        }
    }

    SampleException error(String cause, Throwable t) {
        return t == null ? new SampleException(source.name(), SampleException.Stage.DECODE, noun + " " + source.name() + ": " + cause)
                : new SampleException(source.name(), SampleException.Stage.DECODE, noun + " " + source.name() + ": " + cause, t);
    }

    // Upcall from FFmpeg: fill buf with up to size bytes at the current position.
    @SuppressWarnings("unused")
    private int readPacket(MemorySegment opaque, MemorySegment buf, int size) {
        try {
            if (System.nanoTime() - deadlineNanos > 0) {
                pastDeadline = true;
                return AvField.Constant.AVERROR_EXIT.value;
            }
            // size is FFmpeg's own buffer: the AVIO buffer, or for a packet larger than it (a 4K keyframe), the
            // packet's memory, which avio_read fills directly
            if (size <= 0) return AvField.Constant.AVERROR_EIO.value;
            int n = source.read(positionBytes, buf.reinterpret(size));
            if (n < 0) return AvField.Constant.AVERROR_EOF.value;
            if (n == 0 || n > size) return AvField.Constant.AVERROR_EIO.value;
            positionBytes += n;
            return n;
        } catch (Throwable t) {
            if (readFailure == null) readFailure = t;
            return AvField.Constant.AVERROR_EIO.value;
        }
    }

    // Upcall from FFmpeg: move to offset (whence SEEK_SET/CUR/END, or AVSEEK_SIZE to ask the size).
    @SuppressWarnings("unused")
    private long seek(MemorySegment opaque, long offset, int whence) {
        try {
            int how = whence & ~AvField.Constant.AVSEEK_FORCE.value;
            if (how == AvField.Constant.AVSEEK_SIZE.value) return sourceSizeBytes >= 0 ? sourceSizeBytes : -1;
            long target;
            switch (how) {
                case 0 -> target = offset;
                case 1 -> target = positionBytes + offset;
                case 2 -> {
                    if (sourceSizeBytes < 0) return -1;
                    target = sourceSizeBytes + offset;
                }
                default -> { return -1; }
            }
            if (target < 0 || (sourceSizeBytes >= 0 && target > sourceSizeBytes)) return -1;
            positionBytes = target;
            return target;
        } catch (Throwable t) {
            if (readFailure == null) readFailure = t;
            return -1;
        }
    }

    @Override
    public void close() {
        if (closed) return;
        closed = true;
        try {
            if (!packet.equals(MemorySegment.NULL)) {
                ff.avPacketFree.invokeExact(arena.allocateFrom(ValueLayout.ADDRESS, packet));
                packet = MemorySegment.NULL;
            }
            if (!format.equals(MemorySegment.NULL)) {
                // AVFMT_FLAG_CUSTOM_IO: avformat_close_input leaves our AVIOContext alone.
                ff.avformatCloseInput.invokeExact(arena.allocateFrom(ValueLayout.ADDRESS, format));
                format = MemorySegment.NULL;
            }
            if (!avio.equals(MemorySegment.NULL)) {
                // FFmpeg may have replaced the buffer it was given: free the one the context holds now.
                ff.avFreep.invokeExact(avio.asSlice(AvField.AVIOContext_buffer.offset, ValueLayout.ADDRESS.byteSize()));
                ff.avioContextFree.invokeExact(arena.allocateFrom(ValueLayout.ADDRESS, avio));
                avio = MemorySegment.NULL;
            }
        } catch (Throwable t) {
            throw new IllegalStateException("closing the demuxer of " + source.name() + " failed", t);
        } finally {
            FfmpegLog.unregister(allocatedFormat);
            FfmpegLog.unregister(registeredAvio);
            arena.close();
        }
    }
}
