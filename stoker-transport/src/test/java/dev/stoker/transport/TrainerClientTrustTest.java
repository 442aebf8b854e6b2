package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audit #19: the Java client refuses a service it cannot trust — a socket in a folder another user
 * owns or may write, a socket of another user, a segment file that is a link, another user's or
 * writable by others — naming the path and the cause; each case against a real {@link FeedServer},
 * and each ends with the same trainer served from a proper folder.
 */
@Timeout(30)
class TrainerClientTrustTest {
    static final int NOBODY = 65534;
    @TempDir Path tmp;

    private static boolean root() throws IOException {
        return "0".equals(String.valueOf(Files.getAttribute(Path.of("/proc/self"), "unix:uid")));
    }

    private static void mode(Path p, String mode) throws IOException {
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString(mode));
    }

    private static void chown(Path p, int uid) throws IOException {
        Files.setAttribute(p, "unix:uid", uid, LinkOption.NOFOLLOW_LINKS);
    }

    private Path folder(String name) throws IOException {
        Path dir = Files.createDirectory(tmp.resolve(name));
        mode(dir, "rwx------");
        return dir;
    }

    /** Connecting to {@code sock} is refused with a message naming {@code path} and containing {@code cause}. */
    private static void refused(Path sock, Path path, String cause) {
        var e = assertThrows(IOException.class, () -> TrainerClient.connect(sock, 0, 1, "t").close());
        assertTrue(e.getMessage().contains(path.toString()) && e.getMessage().contains(cause), e.getMessage());
    }

    /** A trainer served every batch from {@code sock}, by reference. */
    private static void served(Path sock, int steps) throws IOException {
        try (var client = TrainerClient.connect(sock, 0, 1, "t", TrainerClient.Options.SHARED_MEMORY)) {
            for (int step = 0; step < steps; step++)
                try (var r = client.next()) {
                    assertTrue(r.byReference());
                    assertArrayEquals(FeedServerTest.Synthetic.batch(0, step).tensors().get(1).toFloats(),
                            r.batch().tensor("pixel_values").toFloats());
                }
            assertNull(client.next());
        }
    }

    @Test
    void aSocketFolderOthersMayWriteIsRefused() throws Exception {
        Path dir = folder("run");
        Path sock = dir.resolve("feed.sock");
        try (var server = new FeedServer(sock, new FeedServerTest.Synthetic(1, 2), false)) {
            mode(dir, "rwxrwxrwx"); // as a /tmp/stoker-<uid> another user made first
            refused(sock, dir, "writable by its group and others (mode rwxrwxrwx)");
            mode(dir, "rwxrwx---");
            refused(sock, dir, "writable by its group");
            mode(dir, "rwx------");
            try (var client = TrainerClient.connect(sock, 0, 1, "t")) {
                assertArrayEquals(FeedServerTest.Synthetic.batch(0, 0).tensors().get(1).toFloats(),
                        client.next().batch().tensor("pixel_values").toFloats());
            }
        }
    }

    @Test
    void aSocketFolderThatIsALinkIsRefused() throws Exception {
        Path dir = folder("real");
        Path link = Files.createSymbolicLink(tmp.resolve("link"), dir);
        try (var server = new FeedServer(dir.resolve("feed.sock"), new FeedServerTest.Synthetic(1, 1), false)) {
            refused(link.resolve("feed.sock"), link, "symbolic link");
            try (var client = TrainerClient.connect(dir.resolve("feed.sock"), 0, 1, "t")) {
                client.next().close();
            }
        }
    }

    @Test
    void anotherUsersSocketFolderOrSocketIsRefused() throws Exception {
        assumeTrue(root(), "making a folder another user owns needs root (chown)");
        Path dir = folder("theirs");
        Path sock = dir.resolve("feed.sock");
        try (var server = new FeedServer(sock, new FeedServerTest.Synthetic(1, 2), false)) {
            chown(dir, NOBODY);
            refused(sock, dir, "belongs to uid " + NOBODY);
            chown(dir, 0);
            chown(sock, NOBODY); // a socket another user put in a folder of ours
            refused(sock, sock, "belongs to uid " + NOBODY);
            chown(sock, 0);
            try (var client = TrainerClient.connect(sock, 0, 1, "t")) {
                client.next().close();
            }
        }
    }

    @Test
    void aSegmentThatIsALinkIsRefusedAndTheVictimIsNotMapped() throws Exception {
        Path shm = folder("shm");
        Path run = folder("run");
        var provider = new FileSegments(shm, 2);
        Path victim = Files.writeString(tmp.resolve("victim"), "x".repeat(1 << 20));
        Path link = Files.createSymbolicLink(shm.resolve("link"), victim);
        provider.named = step -> link;
        try (var server = new FeedServer(run.resolve("feed.sock"), provider, false);
             var client = TrainerClient.connect(run.resolve("feed.sock"), 0, 1, "t", TrainerClient.Options.SHARED_MEMORY)) {
            var e = assertThrows(IOException.class, client::next);
            assertTrue(e.getMessage().contains(link.toString()) && e.getMessage().contains("symbolic link"), e.getMessage());
            assertTrue(client.mappedSegments() == 0, "nothing mapped");
        }
        var good = new FileSegments(folder("shm2"), 3);
        try (var server = new FeedServer(run.resolve("feed2.sock"), good, false)) {
            served(run.resolve("feed2.sock"), 3);
        }
    }

    @Test
    void aSegmentOthersMayWriteOrAnotherUserOwnsIsRefused() throws Exception {
        Path shm = folder("shm");
        Path run = folder("run");
        var provider = new FileSegments(shm, 3);
        var tamper = new java.util.concurrent.atomic.AtomicReference<String>("writable");
        IntFunctionPath plain = step -> shm.resolve("seg-" + step);
        provider.named = step -> {
            Path p = plain.apply(step);
            try {
                if (tamper.get().equals("writable")) mode(p, "rw-rw-rw-");
                if (tamper.get().equals("owner")) chown(p, NOBODY);
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
            return p;
        };
        Path sock = run.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false)) {
            try (var client = TrainerClient.connect(sock, 0, 1, "t", TrainerClient.Options.SHARED_MEMORY)) {
                var e = assertThrows(IOException.class, client::next);
                assertTrue(e.getMessage().contains(shm.resolve("seg-0").toString()) && e.getMessage().contains("writable by its group and others"),
                        e.getMessage());
            }
            if (root()) {
                tamper.set("owner");
                try (var client = TrainerClient.connect(sock, 0, 1, "t", TrainerClient.Options.SHARED_MEMORY)) {
                    var e = assertThrows(IOException.class, client::next);
                    assertTrue(e.getMessage().contains("belongs to uid " + NOBODY), e.getMessage());
                }
            }
        }
        var good = new FileSegments(folder("shm2"), 3);
        try (var server = new FeedServer(run.resolve("feed2.sock"), good, false)) {
            served(run.resolve("feed2.sock"), 3);
        }
    }

    private interface IntFunctionPath extends java.util.function.IntFunction<Path> {}
}
