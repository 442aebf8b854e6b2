package dev.stoker.source;

import static dev.stoker.source.TestData.failure;
import static dev.stoker.source.TestData.get;
import static dev.stoker.source.TestData.image;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.FileChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audit #22 with real files: a FIFO, a directory, a socket, a symlink to a FIFO and devices named as images are refused at
 * once, each as that sample's error naming the path and what it is, and a good image is read after them; a local read
 * that blocks in the kernel (an open of a FIFO no one writes, standing in for a hung network file system) fails its
 * sample at the read timeout, its thread is replaced so that other reads go on, and the thread is given back once the
 * read returns.
 */
@Timeout(120)
class HostileLocalFilesTest {
    @TempDir
    static Path dir;
    static Path manifest;
    static Path images;
    static String good;

    @BeforeAll
    static void writeDataset() throws Exception {
        good = TestData.imageNames().get(0);
        images = Files.createDirectories(dir.resolve("ds/images"));
        Files.copy(TestData.IMAGES.resolve(good), images.resolve(good));
        manifest = Files.write(dir.resolve("ds/train.jsonl"), TestData.manifest());
        mkfifo(images.resolve("fifo.jpg"));
        Files.createDirectories(images.resolve("folder.jpg"));
        Files.createSymbolicLink(images.resolve("link-to-fifo.jpg"), images.resolve("fifo.jpg"));
        try (var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            server.bind(UnixDomainSocketAddress.of(images.resolve("sock.jpg"))); // the socket file stays after close
        }
    }

    static void mkfifo(Path p) throws Exception {
        var proc = new ProcessBuilder("mkfifo", p.toString()).inheritIO().start();
        assertEquals(0, proc.waitFor(), "mkfifo " + p);
    }

    @Test
    void everyFileThatIsNotRegularIsRefusedAtOnceNamingItsPathAndKind() {
        String[][] cases = {
            {"images/fifo.jpg", "a FIFO (named pipe), not a regular file: " + images.resolve("fifo.jpg")},
            {"images/link-to-fifo.jpg", "a FIFO (named pipe), not a regular file: " + images.resolve("link-to-fifo.jpg")
                    + " (a link to " + images.resolve("fifo.jpg") + ")"},
            {"images/folder.jpg", "a directory, not a regular file: " + images.resolve("folder.jpg")},
            {"images/sock.jpg", "a socket, not a regular file: " + images.resolve("sock.jpg")},
            {images.resolve("fifo.jpg").toUri().toString(), "a FIFO (named pipe), not a regular file"},
        };
        try (var source = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            for (String[] c : cases) {
                var e = failure(source.fetch("s3", c[0]));
                assertEquals("s3", e.sampleId());
                assertEquals(SampleException.Stage.FETCH, e.stage());
                assertTrue(e.getMessage().startsWith(c[1]), c[0] + ": " + e.getMessage());
                assertEquals(c[1].substring(0, c[1].indexOf(", not a regular file")) + ", not a regular file", SampleException.reasonOf(e.getMessage()),
                        "the cause's class in the counts says what the file is");
            }
            // a record range (a shard or manifest read) of a FIFO is refused the same way
            var range = failure(source.fetchRange("images/fifo.jpg", 0, 10));
            assertTrue(range.getMessage().startsWith("a FIFO (named pipe), not a regular file"), range.getMessage());
            // and a good image is read after all of them
            assertArrayEquals(image(good), get(source.fetch("s4", "images/" + good)));
            assertEquals(cases.length + 1, source.metrics().failures());
        }
    }

    @Test
    void devicesAreRefusedWhenAManifestMayNameThem() {
        var names = new ArrayList<>(List.of("/dev/zero", "/dev/null"));
        if (Files.exists(Path.of("/dev/stdin"))) names.add("/dev/stdin");
        try (var source = ObjectSources.open(manifest.toString(), SourceConfig.builder().refsOutsideRoot(true).build())) {
            for (String device : names) {
                var e = failure(source.fetch("s5", "file://" + device));
                assertTrue(e.getMessage().contains("not a regular file: " + device), device + ": " + e.getMessage());
                if (!device.equals("/dev/stdin")) assertTrue(e.getMessage().startsWith("a character device"), e.getMessage());
            }
            assertArrayEquals(image(good), get(source.fetch("s6", "images/" + good)));
        }
    }

    /**
     * The smallest honest seam: the opener, which for {@code hang*.jpg} (regular files, so they pass the checks) opens a
     * real FIFO that no one writes, so the read blocks in the kernel's open(2), where no interrupt reaches it, as a read
     * of a hung hard NFS mount does. (A real blocking regular file needs a FUSE or NFS mount, which a test cannot make.)
     */
    @Test
    void aReadThatBlocksInTheKernelFailsAtTheTimeoutAndItsThreadIsReplaced() throws Exception {
        Path pipe = dir.resolve("never-written");
        mkfifo(pipe);
        for (int i = 0; i < 3; i++) Files.writeString(images.resolve("hang" + i + ".jpg"), "regular");
        LocalReader.Opener opener = f -> f.getFileName().toString().startsWith("hang")
                ? FileChannel.open(pipe, StandardOpenOption.READ) : LocalReader.NO_FOLLOW.open(f);
        var config = SourceConfig.builder().maxInFlight(2).localReadTimeoutMillis(300).build();
        var ctx = new FetchContext(config);
        var reader = new LocalReader(ctx, opener);
        try {
            int width = 2; // min(maxInFlight, max(2, cores))
            // as many hung reads as the pool has threads: both fail at the timeout, naming the file and the cause
            var hung = new ArrayList<CompletableFuture<byte[]>>();
            for (int i = 0; i < 2; i++)
                hung.add(reader.read("h" + i, images.resolve("hang" + i + ".jpg"), null, SampleException.Stage.FETCH));
            for (int i = 0; i < 2; i++) {
                var e = failure(hung.get(i));
                assertEquals("h" + i, e.sampleId());
                assertEquals("local read timed out after 300 ms: " + images.resolve("hang" + i + ".jpg")
                        + " (a hung network file system or a device that never ends? --local-read-timeout-ms)", e.getMessage());
                assertEquals("local read timed out after N ms", SampleException.reasonOf(e.getMessage()));
            }
            // the two threads are still stuck in open(2); a good read is served all the same, by a thread added for them
            assertArrayEquals(image(good), get(reader.read("g", images.resolve(good), null, SampleException.Stage.FETCH)));
            assertArrayEquals(java.util.Arrays.copyOf(image(good), 100),
                    get(reader.readRange("g", images.resolve(good), null, 0, 100, SampleException.Stage.FETCH)));
            // a range read that hangs times out the same way
            var range = failure(reader.readRange("h2", images.resolve("hang2.jpg"), null, 0, 10, SampleException.Stage.MANIFEST));
            assertTrue(range.getMessage().startsWith("local read timed out after 300 ms: "), range.getMessage());
            assertTrue(reader.poolSize() >= width + 2, "a thread was added for each hung read: " + reader.poolSize());
            // a writer lets the stuck opens return: their threads come back and the extra ones go
            try (var writer = FileChannel.open(pipe, StandardOpenOption.WRITE)) {
                while (reader.poolSize() > width) Thread.sleep(20);
            }
            assertArrayEquals(image(good), get(reader.read("g2", images.resolve(good), null, SampleException.Stage.FETCH)));
        } finally {
            reader.close();
            ctx.close();
        }
    }
}
