package dev.stoker.video.isolate;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.decode.VideoDecoder;
import dev.stoker.video.ffmpeg.FrameReader;
import dev.stoker.video.index.FrameIndex;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Decodes videos in worker processes ({@link DecodeWorker}), so that a file that crashes libavcodec fails that
 * video — reported like any bad input, naming it — and never the node: libavcodec is native code, and a fault in
 * it ends the JVM it runs in. The same contract as {@link VideoDecoder#decode}: the frames asked for, each handed to
 * the sink as it arrives.
 *
 * <p>Workers are JVMs started on demand (at most {@code maxWorkers}, kept between videos; a caller waits for a free
 * one until its deadline). A local file is opened by the worker itself; any other source (bytes in memory, a
 * WebDataset member, S3) is read through the protocol, position by position, as FFmpeg asks. A worker that dies
 * mid-video fails that video; one past the video's deadline (plus {@link #KILL_GRACE_MILLIS}) is killed, which also
 * bounds a decoder caught in a native loop. The next video gets a fresh worker.
 *
 * <p>Threading: thread-safe; each call holds one worker.
 */
public final class IsolatedDecoder implements dev.stoker.video.decode.FrameDecoder, AutoCloseable {
    /** How long past a video's deadline its worker may run before it is killed (the worker stops itself at the deadline). */
    public static final long KILL_GRACE_MILLIS = 2_000;
    private static final AtomicInteger IDS = new AtomicInteger();

    private final int maxWorkers;
    private final List<String> command;
    /** Where a crashing worker's JVM writes its fatal error report (hs_err_PID.log). */
    private final Path crashReportDir = Path.of(System.getProperty("java.io.tmpdir"), "stoker-video-workers");
    private final Semaphore permits;
    private final ConcurrentLinkedQueue<Worker> idle = new ConcurrentLinkedQueue<>();
    private final ScheduledExecutorService watchdog = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "stoker-video-watchdog");
        t.setDaemon(true);
        return t;
    });
    private final AtomicInteger started = new AtomicInteger();
    private final AtomicInteger died = new AtomicInteger();
    private volatile boolean closed;

    /**
     * @param maxWorkers      worker processes at most (the decode threads that may use them)
     * @param workerJvmOptions extra JVM options for the workers (tests pass the crash hook)
     */
    public IsolatedDecoder(int maxWorkers, List<String> workerJvmOptions) {
        if (maxWorkers < 1) throw new IllegalArgumentException("maxWorkers " + maxWorkers);
        this.maxWorkers = maxWorkers;
        this.permits = new Semaphore(maxWorkers, true);
        try {
            java.nio.file.Files.createDirectories(crashReportDir);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException("cannot make " + crashReportDir, e);
        }
        List<String> c = new ArrayList<>();
        c.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        c.addAll(List.of("-XX:+DisplayVMOutputToStderr", "-XX:-CreateCoredumpOnCrash",
                "-XX:ErrorFile=" + crashReportDir.resolve("hs_err_%p.log"),
                "-Xmx256m", "-XX:+UseSerialGC", "-Xss512k", "--enable-native-access=ALL-UNNAMED",
                "-cp", System.getProperty("java.class.path")));
        c.addAll(workerJvmOptions);
        c.add(DecodeWorker.class.getName());
        this.command = List.copyOf(c);
    }

    /** Worker processes started so far (a new one after each death). */
    public int workersStarted() { return started.get(); }

    /** Workers that died or were killed while decoding a video. */
    public int workersDied() { return died.get(); }

    /** As {@link VideoDecoder#decode(SeekableByteSource, FrameIndex, int[], long, VideoDecoder.FrameSink)}, in a worker. */
    @Override
    public VideoDecoder.Result decode(SeekableByteSource source, FrameIndex index, int[] frames, long deadlineNanos,
                                      VideoDecoder.FrameSink sink) {
        if (closed) throw new IllegalStateException("closed");
        long waitNanos = deadlineNanos - System.nanoTime();
        try {
            if (!permits.tryAcquire(Math.max(0, waitNanos), TimeUnit.NANOSECONDS)) {
                throw error(source, "no decode worker came free before the deadline (" + maxWorkers + " busy)");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw error(source, "interrupted while waiting for a decode worker");
        }
        Worker worker = null;
        try {
            worker = idle.poll();
            if (worker == null || !worker.process.isAlive()) worker = start(source);
            VideoDecoder.Result r = worker.run(source, index, frames, deadlineNanos, sink);
            idle.add(worker);
            worker = null;
            return r;
        } catch (ReportedError e) {
            idle.add(worker); // the worker reported the video's error and waits for the next one
            worker = null;
            throw e.error;
        } finally {
            if (worker != null) worker.destroy();
            permits.release();
        }
    }

    private Worker start(SeekableByteSource source) {
        try {
            Process p = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.DISCARD).start();
            started.incrementAndGet();
            return new Worker(p);
        } catch (IOException e) {
            throw error(source, "cannot start a decode worker process: " + e.getMessage());
        }
    }

    private static SampleException error(SeekableByteSource source, String cause) {
        return new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name() + ": " + cause);
    }

    @Override
    public void close() {
        closed = true;
        Worker w;
        while ((w = idle.poll()) != null) w.destroy();
        watchdog.shutdownNow();
    }

    /** A video's error as the worker reported it: the worker itself is fine. */
    private static final class ReportedError extends RuntimeException {
        final SampleException error;

        ReportedError(SampleException error) {
            super(null, null, false, false);
            this.error = error;
        }
    }

    /** One worker process and its streams; used by one caller at a time. */
    private final class Worker {
        final Process process;
        final DataOutputStream out;
        final DataInputStream in;
        byte[] buffer = new byte[1 << 16];

        Worker(Process process) {
            this.process = process;
            this.out = WireFormat.out(process.getOutputStream());
            this.in = WireFormat.in(process.getInputStream());
        }

        VideoDecoder.Result run(SeekableByteSource source, FrameIndex index, int[] frames, long deadlineNanos,
                                VideoDecoder.FrameSink sink) {
            long budgetMillis = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime()));
            AtomicBoolean killed = new AtomicBoolean();
            var kill = watchdog.schedule(() -> {
                killed.set(true);
                process.destroyForcibly();
            }, budgetMillis + KILL_GRACE_MILLIS, TimeUnit.MILLISECONDS);
            try {
                send(source, index, frames, budgetMillis);
                return receive(source, frames, sink);
            } catch (IOException e) {
                died.incrementAndGet();
                throw error(source, killed.get()
                        ? "the decode worker was still running " + KILL_GRACE_MILLIS + " ms past the video's deadline "
                                + "and was killed (the video is reported; the job goes on)"
                        : "the decode worker process died while decoding it (" + exitText() + "); the video is "
                                + "reported, the job goes on");
            } finally {
                kill.cancel(false);
            }
        }

        private void send(SeekableByteSource source, FrameIndex index, int[] frames, long budgetMillis) throws IOException {
            byte[] indexBytes = index.toBytes();
            Path local = source.localFile();
            out.writeByte(WireFormat.DECODE);
            out.writeInt(IDS.incrementAndGet());
            out.writeUTF(source.name());
            out.writeLong(source.sizeBytes());
            out.writeBoolean(local != null);
            if (local != null) out.writeUTF(local.toAbsolutePath().toString());
            out.writeInt(frames.length);
            for (int f : frames) out.writeInt(f);
            out.writeLong(budgetMillis);
            out.writeInt(indexBytes.length);
            out.write(indexBytes);
            out.flush();
        }

        private VideoDecoder.Result receive(SeekableByteSource source, int[] frames, VideoDecoder.FrameSink sink)
                throws IOException {
            int lastFrame = -1;
            int maxFrame = frames.length == 0 ? -1 : frames[frames.length - 1];
            while (true) {
                int type = in.readByte();
                switch (type) {
                    case WireFormat.READ -> answerRead(source);
                    case WireFormat.FRAME -> {
                        int f = WireFormat.boundedInt(in.readInt(), lastFrame + 1, maxFrame, "frame");
                        int w = WireFormat.boundedInt(in.readInt(), 1, FrameReader.MAX_DIMENSION, "width");
                        int h = WireFormat.boundedInt(in.readInt(), 1, FrameReader.MAX_DIMENSION, "height");
                        if ((long) w * h > FrameReader.MAX_PIXELS) throw new IOException("frame of " + w + "x" + h);
                        int size = w * h * 3;
                        if (buffer.length < size) buffer = new byte[size];
                        in.readFully(buffer, 0, size);
                        lastFrame = f;
                        sink.accept(f, w, h, buffer);
                    }
                    case WireFormat.DONE -> {
                        return new VideoDecoder.Result(in.readLong(), in.readInt(), in.readInt(), in.readLong());
                    }
                    case WireFormat.ERROR -> throw new ReportedError(
                            new SampleException(source.name(), SampleException.Stage.DECODE, in.readUTF()));
                    default -> throw new IOException("decode worker protocol: message " + type);
                }
            }
        }

        private void answerRead(SeekableByteSource source) throws IOException {
            long position = in.readLong();
            int len = WireFormat.boundedInt(in.readInt(), 1, WireFormat.MAX_READ_BYTES, "read length");
            if (buffer.length < len) buffer = new byte[len];
            int n;
            try {
                n = source.read(position, MemorySegment.ofArray(buffer).asSlice(0, len));
            } catch (IOException | RuntimeException e) {
                out.writeByte(WireFormat.BYTES);
                out.writeInt(-2);
                out.writeUTF(String.valueOf(e.getMessage()));
                out.flush();
                return;
            }
            out.writeByte(WireFormat.BYTES);
            out.writeInt(n < 0 ? -1 : n);
            if (n > 0) out.write(buffer, 0, n);
            out.flush();
        }

        private String exitText() {
            try {
                if (!process.waitFor(5, TimeUnit.SECONDS)) return "still running";
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return "interrupted";
            }
            int code = process.exitValue();
            Path report = crashReportDir.resolve("hs_err_" + process.pid() + ".log");
            if (java.nio.file.Files.isRegularFile(report)) {
                // the JVM's fatal error handler ran: a signal in native code (it exits 1 when no core is dumped)
                return "it crashed in native code: " + crashSummary(report) + "; report " + report;
            }
            return code > 128 ? "exit status " + code + ", signal " + (code - 128)

                    : "exit status " + code;
        }

        /** "SIGSEGV (0xb) in libavcodec.so.59+0x1234": the signal and the problematic frame of a JVM crash report. */
        private static String crashSummary(Path report) {
            String signal = "a fatal signal", frame = "";
            try (var lines = java.nio.file.Files.lines(report, java.nio.charset.StandardCharsets.ISO_8859_1)) {
                var head = lines.limit(40).toList();
                for (int i = 0; i < head.size(); i++) {
                    String l = head.get(i);
                    if (l.startsWith("#  SIG")) signal = l.substring(3).replaceAll(" at pc=.*", "").trim();
                    if (l.startsWith("# Problematic frame:") && i + 1 < head.size()) {
                        frame = " in " + head.get(i + 1).substring(1).trim();
                    }
                }
            } catch (IOException | java.io.UncheckedIOException e) {
                return signal;
            }
            return signal + frame;
        }

        void destroy() {
            try {
                out.close();
            } catch (IOException ignored) {
                // the process is going anyway
            }
            process.destroyForcibly();
        }
    }
}
