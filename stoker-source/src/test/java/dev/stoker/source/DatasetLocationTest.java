package dev.stoker.source;

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
        assertEquals(new References.S3Target("other", "k/x.jpg"), References.resolve("s", "s3://other/k/x.jpg", root));
        for (String escape : new String[] {"../x.jpg", "../../x.jpg", "img/../../v1/x.jpg", "/abs.jpg", "img/", ".."}) {
            var e = assertThrows(SampleException.class, () -> References.resolve("s7", escape, root), escape);
            assertEquals("s7", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
        }
    }

    @Test
    void localReferencesStayUnderTheRoot() {
        var root = (DatasetLocation.Local) DatasetLocation.parse("/data/ds/train.jsonl");
        assertEquals(new References.FileTarget(Path.of("/data/ds/img/a.jpg"), true), References.resolve("s", "img/../img/a.jpg", root));
        assertEquals(new References.FileTarget(Path.of("/data/ds/a.jpg"), true), References.resolve("s", "/data/ds/a.jpg", root));
        assertEquals(new References.FileTarget(Path.of("/elsewhere/a.jpg"), false), References.resolve("s", "file:///elsewhere/a.jpg", root));
        for (String escape : new String[] {"../x.jpg", "../../x.jpg", "/etc/passwd", "img/../../x.jpg", " "}) {
            var e = assertThrows(SampleException.class, () -> References.resolve("s", escape, root), escape);
            assertTrue(e.getMessage().contains("escapes") || e.getMessage().contains("empty"), e.getMessage());
        }
    }
}
