package dev.stoker.source;

import static dev.stoker.source.TestData.assertFetchRefused;
import static dev.stoker.source.TestData.get;
import static dev.stoker.source.TestData.image;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.io.IOException;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** Against a real S3 API: S3Mock on a free loopback port, shared by the test classes of the run. */
@ExtendWith(S3MockExtension.class)
@Timeout(120)
class S3ObjectSourceTest {
    static final String BUCKET = "object-source-test";
    static final String MANIFEST = "s3://" + BUCKET + "/ds/v1/train.jsonl";
    static S3MockServer s3;
    static List<String> names;

    @BeforeAll
    static void upload(S3MockServer server) throws IOException {
        s3 = server;
        names = TestData.imageNames();
        s3.createBucket(BUCKET);
        assertEquals(names.size(), s3.putDirectory(BUCKET, "ds/v1/images", TestData.IMAGES));
        s3.putObject(BUCKET, "ds/v1/train.jsonl", TestData.manifest());
        s3.putObject(BUCKET, "ds/other/x.jpg", image(names.get(2)));
        s3.createBucket(BUCKET + "-other");
        s3.putObject(BUCKET + "-other", "x.jpg", image(names.get(3)));
    }

    static SourceConfig.Builder config() {
        return SourceConfig.builder().endpointOverride(s3.endpoint()).pathStyle(true).credentials("test-key", "test-secret");
    }

    @Test
    void manifestAndImagesFromS3EqualTheLocalFiles() {
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertEquals("s3://" + BUCKET + "/ds/v1/", source.location().root());
            byte[] manifest = get(source.fetchManifest());
            assertArrayEquals(TestData.manifest(), manifest);
            var refs = TestData.references(manifest);
            assertEquals(names.size(), refs.size());
            long bytes = manifest.length;
            for (int i = 0; i < refs.size(); i++) {
                byte[] expected = image(names.get(i));
                assertArrayEquals(expected, get(source.fetch("s" + i, refs.get(i))), refs.get(i));
                bytes += expected.length;
            }
            var m = source.metrics();
            assertEquals(bytes, m.bytesFetched());
            assertEquals(refs.size() + 1, m.completed());
            assertEquals(refs.size() + 1, m.firstByteLatency().count());
            assertEquals(0, m.retries());
        }
    }

    /**
     * Audit #23: an s3:// URI of the data set's bucket is fetched; another bucket's object or a local file only when
     * allowed, and the refused ones never reach the server.
     */
    @Test
    void absoluteUrisAreConfinedToTheBucketUnlessAllowed() {
        String otherBucket = "s3://" + BUCKET + "-other/x.jpg";
        String localFile = TestData.IMAGES.resolve(names.get(1)).toUri().toString();
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertArrayEquals(image(names.get(2)), get(source.fetch("s", "s3://" + BUCKET + "/ds/other/x.jpg")));
            assertArrayEquals(image(names.get(0)), get(source.fetch("s", "./images/../images//" + names.get(0))));
            assertFetchRefused(source, otherBucket, "leaves the data set's bucket " + BUCKET);
            assertFetchRefused(source, localFile, "in a data set on S3");
            assertEquals(2, source.metrics().failures());
            assertEquals(2, source.metrics().firstByteLatency().count(), "the refused ones were never asked for");
        }
        try (var source = ObjectSources.open(MANIFEST, config().refsOutsideRoot(true).build())) {
            assertArrayEquals(image(names.get(3)), get(source.fetch("s", otherBucket)));
            assertArrayEquals(image(names.get(1)), get(source.fetch("s", localFile)));
        }
    }

    @Test
    void escapesAreRefused() {
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertFetchRefused(source, "../../x.jpg", "escapes the data set root s3://" + BUCKET + "/ds/v1/");
            assertFetchRefused(source, "../other/x.jpg", "escapes the data set root");
            assertFetchRefused(source, "/ds/other/x.jpg", "absolute path");
            assertEquals(3, source.metrics().failures());
            assertEquals(0, source.metrics().firstByteLatency().count());
        }
    }

    @Test
    void missingObjectIsNotFoundAndNotRetried() {
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertFetchRefused(source, "images/missing.jpg", "object not found: s3://" + BUCKET + "/ds/v1/images/missing.jpg");
            assertEquals(0, source.metrics().retries());
            var e = TestData.failure(ObjectSources.open("s3://" + BUCKET + "/nope/train.jsonl", config().build()).fetchManifest());
            assertEquals(SampleException.Stage.MANIFEST, e.stage());
            assertEquals("s3://" + BUCKET + "/nope/train.jsonl", e.sampleId());
        }
    }

    @Test
    void inFlightIsBounded() {
        try (var source = ObjectSources.open(MANIFEST, config().maxInFlight(4).build())) {
            TestData.assertBoundedInFlight(source, names);
            assertTrue(source.metrics().totalLatency().count() >= 200);
        }
    }

    @Test
    void fetchLatencyDelaysFirstByteWithoutThreads() {
        try (var source = ObjectSources.open(MANIFEST, config().fetchLatencyMillis(200).build())) {
            TestData.assertLatencyWithoutThreads(source, "images/" + names.get(1), image(names.get(1)));
        }
    }

    /**
     * A JSON array manifest on S3 is indexed by one streamed GET (never held whole) and its records are read by ranged
     * GETs; the cached index is keyed by the object's ETag, so a new version of it is indexed again.
     */
    @Test
    void anS3ManifestIsIndexedByOneStreamAndReadByRanges(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) throws Exception {
        String array = "[\n  {\"id\": \"a\", \"x\": [1, 2]},\n  {\"id\": \"b\"},\n  {\"id\": \"c\", \"s\": \"]}\"}\n]\n";
        s3.putObject(BUCKET, "ds/array/train.json", array.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        var cache = new ManifestRecords.IndexCache(tmp, 0);
        try (var source = ObjectSources.open("s3://" + BUCKET + "/ds/array/train.json", config().build())) {
            var stat = source.statManifest();
            assertEquals(array.length(), stat.size());
            var records = ManifestRecords.open(source, "train.json", cache);
            assertEquals(3, records.size());
            assertEquals("{\"id\": \"c\", \"s\": \"]}\"}", new String(get(records.read(2)), java.nio.charset.StandardCharsets.UTF_8));
            assertEquals("{\"id\": \"a\", \"x\": [1, 2]}", new String(get(records.read(0)), java.nio.charset.StandardCharsets.UTF_8));
            long before = source.metrics().bytesFetched();
            get(records.read(1));
            assertEquals(11, source.metrics().bytesFetched() - before, "a ranged GET fetches the record's bytes only");
            assertTrue(ManifestRecords.open(source, "train.json", cache).fromCache(), "the same ETag: the saved index");
            s3.putObject(BUCKET, "ds/array/train.json", "[{\"id\": \"z\"}]".getBytes(java.nio.charset.StandardCharsets.UTF_8));
            var changed = ManifestRecords.open(source, "train.json", cache);
            assertEquals(1, changed.size());
            assertEquals("{\"id\": \"z\"}", new String(get(changed.read(0)), java.nio.charset.StandardCharsets.UTF_8));
        }
    }
}
