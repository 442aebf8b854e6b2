package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.await;
import static dev.stoker.store.StoreTesting.config;
import static dev.stoker.store.StoreTesting.fill;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A reused segment keeps in memory only the pages its object's size class needs (issue 30's memory item): a 64 MiB segment
 * reused for a 10 MiB object gives the rest back, and reused again for 40 MiB gets those pages back, filled and faulted in,
 * with the object's bytes intact. Read from this process's own /proc/self/smaps (the segment's mapping's Rss), in a folder
 * on /dev/shm (tmpfs, where the store runs).
 */
@Timeout(60)
class ShmResidentTrimTest {
    private Path dir;

    @BeforeEach
    void folder() throws IOException {
        assumeTrue(Files.isDirectory(Path.of("/dev/shm")) && Files.isReadable(Path.of("/proc/self/smaps")), "needs /dev/shm and /proc");
        dir = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-trim-test");
    }

    @AfterEach
    void removeFolder() throws IOException {
        if (dir == null) return;
        try (var walk = Files.walk(dir)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }

    @Test
    void aSmallerObjectGivesTheSegmentsTailBackAndALargerOneGetsItAgain() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            store.limitResident(1L << 40); // trimming on reuse trades pages for memory: only under a limit, never reached here
            StoredObject bigObject = await(store.allocate(64 * MIB)).seal();
            Path file = bigObject.file();
            assertEquals(1, store.metrics().segmentsCreated());
            assertTrue(residentBytes(file) >= 64 * MIB, "a new segment is resident whole: " + residentBytes(file));
            bigObject.release();

            Allocation small = await(store.allocate(10 * MIB));
            assertEquals(1, store.metrics().segmentsReused(), "the free 64 MiB segment serves the 10 MiB object");
            long trimmed = residentBytes(file);
            assertTrue(trimmed <= 10 * MIB, "pages past the 10 MiB size class went back: " + trimmed);
            fill(small.segment(), 3);
            byte[] smallBytes = small.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject smallObject = small.seal();
            assertArrayEquals(smallBytes, smallObject.segment().toArray(ValueLayout.JAVA_BYTE));
            smallObject.release();

            Allocation larger = await(store.allocate(40 * MIB));
            assertEquals(2, store.metrics().segmentsReused());
            assertEquals(1, store.metrics().segmentsCreated(), "no new segment: the hole was filled again");
            assertTrue(residentBytes(file) >= 40 * MIB, "the 40 MiB object's pages are resident again: " + residentBytes(file));
            fill(larger.segment(), 9);
            byte[] largerBytes = larger.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject o = larger.seal();
            assertArrayEquals(largerBytes, o.segment().toArray(ValueLayout.JAVA_BYTE));
            o.release();
        }
    }

    /** Without a resident limit (the default) a segment reused for a much smaller object keeps all of its pages. */
    @Test
    void withoutAResidentLimitAReusedSegmentKeepsItsPages() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            StoredObject bigObject = await(store.allocate(64 * MIB)).seal();
            Path file = bigObject.file();
            bigObject.release();
            Allocation small = await(store.allocate(10 * MIB));
            assertEquals(1, store.metrics().segmentsReused());
            assertTrue(residentBytes(file) >= 64 * MIB, "no page went back: " + residentBytes(file));
            small.abort();
        }
    }

    /** Rss of this process's mappings of {@code file}, from /proc/self/smaps. */
    static long residentBytes(Path file) throws IOException {
        long kb = 0;
        boolean in = false;
        for (String line : Files.readAllLines(Path.of("/proc/self/smaps"))) {
            if (!line.isEmpty() && Character.isLetterOrDigit(line.charAt(0)) && line.contains("-") && line.indexOf(' ') > 0
                    && line.substring(0, line.indexOf(' ')).matches("[0-9a-f]+-[0-9a-f]+")) {
                in = line.endsWith(file.toString()) || line.endsWith(file.toString() + " (deleted)");
            } else if (in && line.startsWith("Rss:")) {
                kb += Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        return kb * 1024;
    }
}
