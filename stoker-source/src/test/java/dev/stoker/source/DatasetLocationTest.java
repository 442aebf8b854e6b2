package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class DatasetLocationTest {
    @Test
    void s3ManifestRootIsItsPrefix() {
        var loc = assertInstanceOf(DatasetLocation.S3.class, DatasetLocation.parse("s3://bucket/a/b/train.jsonl"));
        assertEquals("bucket", loc.bucket());
        assertEquals("a/b/train.jsonl", loc.key());
        assertEquals("a/b/", loc.rootPrefix());
        assertEquals("s3://bucket/a/b/", loc.root());
        assertEquals("s3://bucket/", DatasetLocation.parse("s3://bucket/train.jsonl").root());
    }

    @Test
    void localPathsAndFileUrisBecomeAbsolute() {
        var rel = assertInstanceOf(DatasetLocation.Local.class, DatasetLocation.parse("data/train.jsonl"));
        assertEquals(Path.of("data/train.jsonl").toAbsolutePath().normalize(), rel.manifest());
        var uri = assertInstanceOf(DatasetLocation.Local.class, DatasetLocation.parse("file:///tmp/my%20set/train.jsonl"));
        assertEquals(Path.of("/tmp/my set/train.jsonl"), uri.manifest());
        assertEquals("/tmp/my set", uri.root());
        assertEquals(Path.of("/tmp/x/t.jsonl"), ((DatasetLocation.Local) DatasetLocation.parse("file:/tmp/x/t.jsonl")).manifest());
    }

    @Test
    void malformedLocationsAreRefused() {
        for (String bad : new String[] {"", "s3://bucket", "s3://bucket/", "s3:///key", "s3://bucket/folder/", "http://host/x.jsonl",
                "file://otherhost/x.jsonl"})
            assertThrows(IllegalArgumentException.class, () -> DatasetLocation.parse(bad), bad);
    }

    @Test
    void s3ReferencesResolveUnderThePrefixWithPathRules() {
        var root = (DatasetLocation.S3) DatasetLocation.parse("s3://b/ds/v1/train.jsonl");
        assertEquals(new References.S3Target("b", "ds/v1/img/c.jpg"), References.resolve("s", "img/./x/../c.jpg", root));
        assertEquals(new References.S3Target("b", "ds/v1/a.jpg"), References.resolve("s", "img//../a.jpg", root));
        assertEquals(new References.S3Target("b", "elsewhere/x.jpg"), References.resolve("s", "s3://b/elsewhere/x.jpg", root));
        assertEquals(new References.S3Target("other", "k/x.jpg"), References.resolve("s", "s3://other/k/x.jpg", root, true));
        assertEquals(new References.S3Target("b", "../other/k"), References.resolve("s", "s3://b/../other/k", root, true));
        for (String escape : new String[] {"../x.jpg", "../../x.jpg", "img/../../v1/x.jpg", "/abs.jpg", "img/", ".."}) {
            var e = assertThrows(SampleException.class, () -> References.resolve("s7", escape, root), escape);
            assertEquals("s7", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
        }
    }

    /**
     * Audit #23: a manifest's URIs are confined too, unless allowed: a file:// URI inside a local root, an s3:// URI in an
     * S3 root's bucket with no dot segments; never the other scheme; each refusal names the sample and the reference.
     */
    @Test
    void urisOfAManifestStayInItsDataSetUnlessAllowed() {
        var local = DatasetLocation.parse("/data/ds/train.jsonl");
        var s3 = DatasetLocation.parse("s3://b/ds/v1/train.jsonl");
        String[][] refused = {
            {"file:///etc/passwd", "/data/ds/train.jsonl", "escapes the data set root /data/ds"},
            {"file:///data/ds/../secret/a.jpg", "/data/ds/train.jsonl", "escapes the data set root"},
            {"file:///data/ds", "/data/ds/train.jsonl", "escapes the data set root"},
            {"file:///data/dsx/a.jpg", "/data/ds/train.jsonl", "escapes the data set root"},
            {"s3://b/ds/v1/a.jpg", "/data/ds/train.jsonl", "in a local data set"},
            {"s3://other/ds/v1/a.jpg", "s3://b/ds/v1/train.jsonl", "leaves the data set's bucket b"},
            {"s3://b/../other/k.jpg", "s3://b/ds/v1/train.jsonl", "has a '..' segment"},
            {"s3://b/ds/./k.jpg", "s3://b/ds/v1/train.jsonl", "has a '.' segment"},
            {"file:///data/ds/a.jpg", "s3://b/ds/v1/train.jsonl", "in a data set on S3"},
        };
        for (String[] c : refused) {
            var root = c[1].startsWith("s3://") ? s3 : local;
            var e = assertThrows(SampleException.class, () -> References.resolve("s9", c[0], root), c[0]);
            assertEquals("s9", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
            assertTrue(e.getMessage().contains(c[2]) && e.getMessage().contains(c[0]) && e.getMessage().contains("--allow-refs-outside-root"),
                    c[0] + ": " + e.getMessage());
            assertDoesNotThrow(() -> References.resolve("s9", c[0], root, true), c[0] + " allowed");
        }
    }

    @Test
    void localReferencesStayUnderTheRoot() {
        var root = (DatasetLocation.Local) DatasetLocation.parse("/data/ds/train.jsonl");
        assertEquals(new References.FileTarget(Path.of("/data/ds/img/a.jpg"), true), References.resolve("s", "img/../img/a.jpg", root));
        assertEquals(new References.FileTarget(Path.of("/data/ds/a.jpg"), true), References.resolve("s", "/data/ds/a.jpg", root));
        assertEquals(new References.FileTarget(Path.of("/data/ds/img/a.jpg"), true), References.resolve("s", "file:///data/ds/img/a.jpg", root));
        assertEquals(new References.FileTarget(Path.of("/elsewhere/a.jpg"), false), References.resolve("s", "file:///elsewhere/a.jpg", root, true));
        for (String escape : new String[] {"../x.jpg", "../../x.jpg", "/etc/passwd", "img/../../x.jpg", " "}) {
            var e = assertThrows(SampleException.class, () -> References.resolve("s", escape, root), escape);
            assertTrue(e.getMessage().contains("escapes") || e.getMessage().contains("empty"), e.getMessage());
        }
    }
}
