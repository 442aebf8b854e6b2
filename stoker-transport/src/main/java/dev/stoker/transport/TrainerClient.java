package dev.stoker.transport;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;

/**
 * The Java trainer side of {@link FeedProtocol}: connects as one rank and receives batches into a
 * reusable buffer (each batch is valid until the next call to {@link #next()}).
 *
 * <p>Threading: one thread at a time per client (it may move between threads).
 */
public final class TrainerClient implements AutoCloseable {
    private final SocketChannel channel;
    private final Arena arena = Arena.ofShared();
    private MemorySegment buffer;
    private long bytesReceived;
    private long lastFrameHeaderNanos;

    private TrainerClient(SocketChannel channel) {
        this.channel = channel;
    }

    /** Connects and says hello; blocks until the service lets the trainer in. */
    public static TrainerClient connect(Path socket, int rank, int world, String job) throws IOException {
        var ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        ch.connect(UnixDomainSocketAddress.of(socket));
        var client = new TrainerClient(ch);
        byte[] name = job.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        var hello = ByteBuffer.allocate(12 + name.length).order(ByteOrder.LITTLE_ENDIAN)
                .putInt(FeedProtocol.VERSION).putInt(rank).putInt(world).put(name).flip();
        FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, hello);
        var f = FeedProtocol.readFrame(ch);
        if (f.type() == FeedProtocol.ERROR) {
            String msg = FeedProtocol.utf8(FeedProtocol.readSmall(ch, f));
            client.close();
            throw new IOException("service refused rank " + rank + ": " + msg);
        }
        if (f.type() != FeedProtocol.WELCOME) {
            client.close();
            throw new IOException("expected WELCOME, got frame type " + f.type());
        }
        ByteBuffer welcome = FeedProtocol.readSmall(ch, f);
        welcome.getInt();
        long expected = welcome.remaining() >= 8 ? welcome.getLong() : 0;
        if (expected > 0) client.buffer = client.arena.allocate(expected, 64); // touched now, not on the first step
        return client;
    }

    /** The next batch (a view of this client's buffer), or null when the feed has ended. */
    public BatchLayout.Batch next() throws IOException {
        FeedProtocol.writeFrame(channel, FeedProtocol.NEXT, null);
        var f = FeedProtocol.readFrame(channel);
        lastFrameHeaderNanos = System.nanoTime();
        switch (f.type()) {
            case FeedProtocol.END -> { return null; }
            case FeedProtocol.ERROR -> throw new IOException("service error: " + FeedProtocol.utf8(FeedProtocol.readSmall(channel, f)));
            case FeedProtocol.BATCH -> {
                if (buffer == null || buffer.byteSize() < f.length()) buffer = arena.allocate(Math.max(f.length(), buffer == null ? 0 : 2 * buffer.byteSize()), 64);
                FeedProtocol.readFully(channel, buffer.asSlice(0, f.length()).asByteBuffer());
                bytesReceived += f.length();
                return BatchLayout.read(buffer.asSlice(0, f.length()));
            }
            default -> throw new IOException("unexpected frame type " + f.type());
        }
    }

    public long bytesReceived() { return bytesReceived; }

    /** When the last reply's frame header arrived ({@link System#nanoTime()}): splits a wait into queueing and transfer. */
    public long lastFrameHeaderNanos() { return lastFrameHeaderNanos; }

    @Override
    public void close() throws IOException {
        try {
            if (channel.isOpen()) FeedProtocol.writeFrame(channel, FeedProtocol.BYE, null);
        } catch (IOException ignored) {
            // closing anyway
        } finally {
            channel.close();
            arena.close();
        }
    }
}
