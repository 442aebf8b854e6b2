package dev.stoker.source;

import static dev.stoker.source.HostileLocalFilesTest.mkfifo;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Streams a source opens to index them — a manifest, a WebDataset shard — are held to the rules of sample reads (issue 19:
 * the local read timeout covered sample reads only): only a regular file is opened, and the open and every refill end
 * within {@code --local-read-timeout-ms}. Real FIFOs stand in for what never ends. The timeouts run on their own thread:
 * an open(2) of a FIFO no one writes is not interrupted, so without the fix a test would hang instead of failing.
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class HostileStreamsTest {
    @TempDir
    Path dir;

    private static byte[] readAll(InputStream in) throws IOException {
        try (in) {
            return in.readAllBytes();
        }
    }

    @Test
    void aFifoNamedAsTheManifestIsRefusedAtOnceNamingIt() throws Exception {
        Path fifo = dir.resolve("train.jsonl");
        mkfifo(fifo);
        try (var source = ObjectSources.open(fifo.toString(), SourceConfig.defaults())) {
            var e = assertThrows(IOException.class, source::openManifest);
            assertEquals("a FIFO (named pipe), not a regular file: " + fifo + "; only regular files are read", e.getMessage());
        }
    }

    @Test
    void aFifoShardOrALinkToOneIsRefusedAndARealShardIsStreamedWhole() throws Exception {
        Files.write(dir.resolve("train.jsonl"), TestData.manifest());
        mkfifo(dir.resolve("shard-0.tar"));
        Files.createSymbolicLink(dir.resolve("shard-1.tar"), dir.resolve("shard-0.tar"));
        byte[] big = new byte[3 * LocalReader.STREAM_CHUNK + 12345]; // refills across chunk boundaries
        new Random(19).nextBytes(big);
        Files.write(dir.resolve("shard-2.tar"), big);
        try (var source = ObjectSources.open(dir.resolve("train.jsonl").toString(), SourceConfig.defaults())) {
            var e = assertThrows(IOException.class, () -> source.open("shard-0.tar"));
            assertEquals("a FIFO (named pipe), not a regular file: " + dir.resolve("shard-0.tar") + "; only regular files are read",
                    e.getMessage());
            e = assertThrows(IOException.class, () -> source.open("shard-1.tar"));
            assertTrue(e.getMessage().startsWith("a FIFO (named pipe), not a regular file: " + dir.resolve("shard-1.tar") + " (a link to "),
                    e.getMessage());
            assertArrayEquals(big, readAll(source.open("shard-2.tar")));
            try (var in = source.open("shard-2.tar")) { // byte by byte and in odd slices agree with the file
                assertEquals(big[0] & 0xff, in.read());
                byte[] rest = new byte[big.length - 1];
                int at = 0;
                for (int n; at < rest.length && (n = in.read(rest, at, Math.min(777, rest.length - at))) > 0; ) at += n;
                assertEquals(rest.length, at);
                assertEquals(-1, in.read());
                assertArrayEquals(java.util.Arrays.copyOfRange(big, 1, big.length), rest);
            }
            assertArrayEquals(TestData.manifest(), readAll(source.openManifest()));
            assertThrows(IOException.class, () -> source.open("missing.tar"), "file not found");
        }
    }

    /**
     * A stream whose open blocks in the kernel (a FIFO no one writes, through the opener seam: a regular file that blocks
     * needs a hung NFS or FUSE mount) and one whose read blocks (a FIFO with a silent writer): each fails at the timeout
     * naming the file; a good stream is read after both.
     */
    @Test
    void anOpenOrAReadThatNeverEndsFailsAtTheTimeout() throws Exception {
        Path pipe = dir.resolve("never-written");
        mkfifo(pipe);
        Path slow = Files.writeString(dir.resolve("slow.jsonl"), "{}\n");
        Path hang = Files.writeString(dir.resolve("hang.jsonl"), "{}\n");
        Path good = Files.write(dir.resolve("good.jsonl"), TestData.manifest());
        FileChannel[] writer = new FileChannel[1];
        LocalReader.Opener opener = f -> {
            String name = f.getFileName().toString();
            if (name.equals("hang.jsonl")) return FileChannel.open(pipe, StandardOpenOption.READ); // blocks in open(2)
            if (name.equals("slow.jsonl")) { // opens (a writer holds the other end), then no byte ever comes
                var read = new Thread(() -> {
                    try {
                        writer[0] = FileChannel.open(pipe, StandardOpenOption.WRITE);
                    } catch (IOException e) {
                        throw new java.io.UncheckedIOException(e);
                    }
                });
                read.start();
                var ch = FileChannel.open(pipe, StandardOpenOption.READ);
                try {
                    read.join();
                } catch (InterruptedException e) {
                    throw new IOException(e);
                }
                return ch;
            }
            return LocalReader.NO_FOLLOW.open(f);
        };
        var ctx = new FetchContext(SourceConfig.builder().maxInFlight(2).localReadTimeoutMillis(300).build());
        var reader = new LocalReader(ctx, opener);
        try {
            String timedOut = " (a hung network file system or a device that never ends? --local-read-timeout-ms)";
            try (var in = reader.stream("slow.jsonl", slow, null)) {
                var e = assertThrows(IOException.class, in::read);
                assertEquals("local read timed out after 300 ms: " + slow + timedOut, e.getMessage());
                assertThrows(IOException.class, in::read, "a failed stream stays failed");
            }
            writer[0].close(); // no writer left: an open of the FIFO for reading now blocks
            var e = assertThrows(IOException.class, () -> reader.stream("hang.jsonl", hang, null));
            assertEquals("local read timed out after 300 ms: " + hang + timedOut, e.getMessage());
            assertArrayEquals(TestData.manifest(), readAll(reader.stream("good.jsonl", good, null)));
        } finally {
            // let the open stuck in the kernel return, so that its thread ends
            try (var w = FileChannel.open(pipe, StandardOpenOption.WRITE)) {
                Thread.sleep(50);
            }
            if (writer[0] != null && writer[0].isOpen()) writer[0].close();
            reader.close();
            ctx.close();
        }
    }
}
