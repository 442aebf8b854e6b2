package dev.stoker.video.isolate;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.decode.VideoDecoder;
import dev.stoker.video.index.FrameIndex;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;

/**
 * The decode worker process's main: reads {@link WireFormat} requests on stdin, decodes each video's frames with
 * {@link VideoDecoder} (on the index the node sends), writes the frames and the outcome on stdout. A crash in libavcodec ends
 * this process, not the node: the node reports that video and starts another worker.
 *
 * <p>stdout carries the protocol only: {@code System.out} is pointed at stderr before anything runs, and the node
 * starts the JVM with {@code -XX:+DisplayVMOutputToStderr} so that the JVM's own messages (a crash report's banner)
 * go there too.
 *
 * <p>Test hook: with {@code -Dstoker.video.worker.crashOn=TEXT}, a request whose video name contains TEXT makes
 * this process fault in native code (SIGSEGV), as a decoder that crashes does; nothing else reads the property.
 */
public final class DecodeWorker {
    static final String CRASH_ON = "stoker.video.worker.crashOn";

    private DecodeWorker() {}

    public static void main(String[] args) throws IOException {
        DataOutputStream out = WireFormat.out(new FileOutputStream(FileDescriptor.out));
        System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.err), true));
        DataInputStream in = WireFormat.in(System.in);
        String crashOn = System.getProperty(CRASH_ON);
        while (true) {
            int type;
            try {
                type = in.readByte();
            } catch (EOFException e) {
                return; // the node closed our stdin: done
            }
            if (type != WireFormat.DECODE) throw new IOException("decode worker: unexpected message " + type);
            serve(in, out, crashOn);
        }
    }

    private static void serve(DataInputStream in, DataOutputStream out, String crashOn) throws IOException {
        in.readInt(); // request id, for the log
        String name = in.readUTF();
        long size = in.readLong();
        String path = in.readBoolean() ? in.readUTF() : null;
        int n = WireFormat.boundedInt(in.readInt(), 0, WireFormat.MAX_FRAMES, "frame count");
        int[] frames = new int[n];
        for (int i = 0; i < n; i++) frames[i] = in.readInt();
        long budgetMillis = in.readLong();
        byte[] indexBytes = new byte[WireFormat.boundedInt(in.readInt(), 0, WireFormat.MAX_INDEX_BYTES, "index bytes")];
        in.readFully(indexBytes);
        long deadline = System.nanoTime() + budgetMillis * 1_000_000L;
        if (crashOn != null && name.contains(crashOn)) crash();
        try (SeekableByteSource source = path != null ? SeekableByteSource.of(Path.of(path))
                : new RemoteSource(name, size, in, out)) {
            var index = FrameIndex.fromBytes(indexBytes);
            VideoDecoder.Result r = VideoDecoder.decode(source, index, frames, deadline, (f, w, h, rgb) -> {
                try {
                    out.writeByte(WireFormat.FRAME);
                    out.writeInt(f);
                    out.writeInt(w);
                    out.writeInt(h);
                    out.write(rgb, 0, w * h * 3);
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            out.writeByte(WireFormat.DONE);
            out.writeLong(r.framesDecoded());
            out.writeInt(r.framesKept());
            out.writeInt(r.seeks());
            out.writeLong(r.nanos());
        } catch (SampleException e) {
            out.writeByte(WireFormat.ERROR);
            out.writeUTF(truncate(e.getMessage()));
        } catch (java.io.UncheckedIOException e) {
            throw e.getCause(); // the node is gone
        } catch (IOException | RuntimeException e) {
            out.writeByte(WireFormat.ERROR);
            out.writeUTF(truncate("video " + name + ": " + e));
        }
        out.flush();
    }

    private static String truncate(String s) { return s.length() > 4000 ? s.substring(0, 4000) + "…" : s; }

    /** Faults in native code, as a crashing decoder does (the test hook): libc's strlen on an unmapped address. */
    private static void crash() {
        try {
            Linker linker = Linker.nativeLinker();
            MemorySegment strlen = linker.defaultLookup().findOrThrow("strlen");
            long n = (long) linker.downcallHandle(strlen, FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS))
                    .invokeExact(MemorySegment.ofAddress(16));
            throw new IllegalStateException("strlen of address 16 returned " + n);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    /** The node's source, read through the protocol ('r' asks, 'B' answers). */
    private static final class RemoteSource implements SeekableByteSource {
        private final String name;
        private final long size;
        private final DataInputStream in;
        private final DataOutputStream out;
        private byte[] buffer = new byte[0];

        RemoteSource(String name, long size, DataInputStream in, DataOutputStream out) {
            this.name = name;
            this.size = size;
            this.in = in;
            this.out = out;
        }

        @Override public String name() { return name; }

        @Override public long sizeBytes() { return size; }

        @Override
        public int read(long position, MemorySegment dst) throws IOException {
            int len = (int) Math.min(dst.byteSize(), WireFormat.MAX_READ_BYTES);
            out.writeByte(WireFormat.READ);
            out.writeLong(position);
            out.writeInt(len);
            out.flush();
            int type = in.readByte();
            if (type != WireFormat.BYTES) throw new IOException("decode worker: expected bytes, got message " + type);
            int n = in.readInt();
            if (n == -1) return -1;
            if (n == -2) throw new IOException(in.readUTF());
            WireFormat.boundedInt(n, 0, len, "bytes answered");
            if (buffer.length < n) buffer = new byte[Math.max(n, 1 << 16)];
            in.readFully(buffer, 0, n);
            MemorySegment.copy(buffer, 0, dst, ValueLayout.JAVA_BYTE, 0, n);
            return n;
        }
    }
}
