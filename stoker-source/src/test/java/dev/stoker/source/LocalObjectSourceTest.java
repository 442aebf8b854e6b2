package dev.stoker.source;

import static dev.stoker.source.TestData.assertFetchRefused;
import static dev.stoker.source.TestData.get;
import static dev.stoker.source.TestData.image;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(60)
class LocalObjectSourceTest {
    @TempDir
    static Path dir;
    static Path manifest;
    static Path outside;
    static List<String> names;

    @BeforeAll
    static void writeDataset() throws IOException {
        names = TestData.imageNames();
        Path images = Files.createDirectories(dir.resolve("ds/images"));
        for (String n : names) Files.copy(TestData.IMAGES.resolve(n), images.resolve(n));
        manifest = Files.write(dir.resolve("ds/train.jsonl"), TestData.manifest());
        outside = Files.write(dir.resolve("outside.jpg"), image(names.get(0)));
        Files.createSymbolicLink(images.resolve("link.jpg"), outside);
    }

    private static ObjectSource open(SourceConfig config) { return ObjectSources.open(manifest.toString(), config); }

    @Test
    void rangesAndStatsOfObjectsUnderTheRoot() throws IOException {
        try (var source = open(SourceConfig.defaults())) {
            String ref = "images/" + names.get(0);
            byte[] whole = image(names.get(0));
            assertArrayEquals(java.util.Arrays.copyOfRange(whole, 10, 110), get(source.fetchRange(ref, 10, 100)));
            assertEquals(whole.length, source.stat(ref).size());
            assertEquals(Files.size(manifest), source.stat("train.jsonl").size());
            var past = org.junit.jupiter.api.Assertions.assertThrows(java.util.concurrent.CompletionException.class,
                    () -> source.fetchRange(ref, whole.length - 5, 10).join());
            assertTrue(past.getCause().getMessage().contains("ends at byte"), past.getCause().getMessage());
            var escape = org.junit.jupiter.api.Assertions.assertThrows(java.util.concurrent.CompletionException.class,
                    () -> source.fetchRange("../outside.jpg", 0, 10).join());
            var se = (dev.stoker.core.SampleException) escape.getCause();
            assertEquals(dev.stoker.core.SampleException.Stage.MANIFEST, se.stage());
            assertTrue(se.getMessage().contains("escapes the data set root"), se.getMessage());
            var link = org.junit.jupiter.api.Assertions.assertThrows(java.util.concurrent.CompletionException.class,
                    () -> source.fetchRange("images/link.jpg", 0, 10).join());
            assertTrue(link.getCause().getMessage().contains("through a symlink"), link.getCause().getMessage());
            org.junit.jupiter.api.Assertions.assertThrows(IOException.class, () -> source.stat("images/link.jpg"));
            org.junit.jupiter.api.Assertions.assertThrows(IOException.class, () -> source.stat("images/none.jpg"));
        }
    }

    @Test
    void manifestAndRelativeImagesAreTheFiles() {
        try (var source = open(SourceConfig.defaults())) {
            byte[] m = get(source.fetchManifest());
            assertArrayEquals(TestData.manifest(), m);
            var refs = TestData.references(m);
            assertEquals(names.size(), refs.size());
            long bytes = m.length;
            for (int i = 0; i < refs.size(); i++) {
                byte[] expected = image(names.get(i));
                assertArrayEquals(expected, get(source.fetch("s" + i, refs.get(i))));
                bytes += expected.length;
            }
            assertEquals(bytes, source.metrics().bytesFetched());
            assertEquals(refs.size() + 1, source.metrics().firstByteLatency().count());
        }
    }

    /** Audit #23: a file:// URI is read inside the data set; outside it (or through a symlink out of it) only when allowed. */
    @Test
    void absoluteFileUriIsConfinedToTheRootUnlessAllowed() {
        try (var source = open(SourceConfig.defaults())) {
            assertArrayEquals(image(names.get(1)), get(source.fetch("s", dir.resolve("ds/images").resolve(names.get(1)).toUri().toString())));
            assertFetchRefused(source, outside.toUri().toString(), "escapes the data set root " + dir.resolve("ds"));
            assertFetchRefused(source, "file:///etc/passwd", "--allow-refs-outside-root");
            assertFetchRefused(source, dir.resolve("ds/images/link.jpg").toUri().toString(), "through a symlink");
            assertEquals(3, source.metrics().failures());
        }
        try (var source = open(SourceConfig.builder().refsOutsideRoot(true).build())) {
            assertArrayEquals(image(names.get(0)), get(source.fetch("s", outside.toUri().toString())));
        }
    }

    @Test
    void escapesAreRefused() {
        try (var source = open(SourceConfig.defaults())) {
            assertFetchRefused(source, "../../x.jpg", "escapes the data set root");
            assertFetchRefused(source, "../outside.jpg", "escapes the data set root");
            assertFetchRefused(source, outside.toString(), "escapes the data set root");
            assertFetchRefused(source, "images/link.jpg", "through a symlink");
            assertEquals(4, source.metrics().failures());
        }
    }

    @Test
    void missingFileIsAClearError() {
        try (var source = open(SourceConfig.defaults())) {
            assertFetchRefused(source, "images/missing.jpg", "file not found: " + dir.resolve("ds/images/missing.jpg"));
        }
    }

    @Test
    void missingManifestFailsAtStageManifest() {
        try (var source = ObjectSources.open(dir.resolve("none/train.jsonl").toString(), SourceConfig.defaults())) {
            var e = TestData.failure(source.fetchManifest());
            assertEquals(SampleException.Stage.MANIFEST, e.stage());
            assertTrue(e.getMessage().contains("file not found"), e.getMessage());
        }
    }

    @Test
    void inFlightIsBounded() {
        try (var source = open(SourceConfig.builder().maxInFlight(4).build())) {
            TestData.assertBoundedInFlight(source, names);
        }
    }

    @Test
    void fetchLatencyDelaysFirstByteWithoutThreads() {
        try (var source = open(SourceConfig.builder().fetchLatencyMillis(200).build())) {
            TestData.assertLatencyWithoutThreads(source, "images/" + names.get(1), image(names.get(1)));
        }
    }
}
