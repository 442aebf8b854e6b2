package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The Java client's segment mappings against a real {@link FeedServer} and real files: identity (audit #31), deleted files (#20). */
@Timeout(30)
class TrainerClientMappingTest {
    @TempDir Path tmp;

    private static float[] pixels(int step) { return FeedServerTest.Synthetic.batch(0, step).tensors().get(1).toFloats(); }

    /**
     * #20: the service deletes each segment once the trainer releases it (as the store does to make
     * room). Before the fix the trainer kept every deleted file mapped for 64 references, memory no
     * budget counts; now it unmaps each at its next reference.
     */
    @Test
    void segmentsTheServiceDeletesAreUnmappedAtTheNextReference() throws Exception {
        Path shm = Files.createDirectory(tmp.resolve("shm"));
        int steps = 12;
        var provider = new FileSegments(shm, steps);
        provider.onRelease = step -> {
            try {
                Files.delete(shm.resolve("seg-" + step));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        };
        Path sock = tmp.resolve("feed.sock");
        long worst = 0;
        try (var server = new FeedServer(sock, provider, false);
             var client = TrainerClient.connect(sock, 0, 1, "t", TrainerClient.Options.SHARED_MEMORY)) {
            for (int step = 0; step < steps; step++) {
                try (var r = client.next()) {
                    assertArrayEquals(pixels(step), r.batch().tensor("pixel_values").toFloats());
                }
                worst = Math.max(worst, FileSegments.deletedMappedBytes(shm));
            }
            assertNull(client.next());
            long after = FileSegments.deletedMappedBytes(shm);
            System.out.printf("deleted segments still mapped by the trainer: at most %d bytes during %d steps, %d at the end (segments of %d bytes)%n",
                    worst, steps, after, FileSegments.FILE_BYTES);
            assertEquals(steps, provider.released.get());
            assertEquals(0, after, "END drops the last deleted segment too");
            assertTrue(worst <= FileSegments.FILE_BYTES, "at most one deleted segment at any time, got " + worst + " bytes");
        }
        assertEquals(0, FileSegments.deletedMappedBytes(shm), "nothing left mapped after close");
    }

    /**
     * #31: a file replaced at the same path (a new inode, same size) is mapped afresh: the trainer
     * reads the new batch, not the old file's bytes; a batch still held in the old file stays
     * readable until it is closed, then that mapping goes.
     */
    @Test
    void aFileReplacedAtTheSamePathIsMappedAfresh() throws Exception {
        Path shm = Files.createDirectory(tmp.resolve("shm"));
        var provider = new FileSegments(shm, 3);
        provider.where = step -> shm.resolve("seg-reused");
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false);
             var client = TrainerClient.connect(sock, 0, 1, "t", TrainerClient.Options.SHARED_MEMORY)) {
            var first = client.next();
            assertArrayEquals(pixels(0), first.batch().tensor("pixel_values").toFloats());
            var second = client.next(); // same path, another file
            assertArrayEquals(pixels(1), second.batch().tensor("pixel_values").toFloats(), "the new file's batch, not the old one's");
            assertArrayEquals(pixels(0), first.batch().tensor("pixel_values").toFloats(), "the held batch is still readable");
            assertEquals(2, client.mappedSegments());
            first.close();
            second.close();
            assertEquals(1, client.mappedSegments(), "the replaced file's mapping went with its last batch");
            try (var third = client.next()) {
                assertArrayEquals(pixels(2), third.batch().tensor("pixel_values").toFloats());
            }
            assertNull(client.next());
        }
    }
}
