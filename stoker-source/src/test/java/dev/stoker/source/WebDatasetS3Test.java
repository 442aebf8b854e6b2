package dev.stoker.source;

import static dev.stoker.source.WebDatasetFormatTest.get;
import static dev.stoker.source.WebDatasetFormatTest.image;
import static dev.stoker.source.WebDatasetFormatTest.json;
import static dev.stoker.source.WebDatasetFormatTest.records;
import static dev.stoker.source.WebDatasetFormatTest.shard;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.source.Tars.Member;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** WebDataset shards on S3 (S3Mock): listed by ListObjectsV2 for a glob, checked for a brace pattern, read by ranged GETs. */
@ExtendWith(S3MockExtension.class)
@Timeout(120)
class WebDatasetS3Test {
    static final String BUCKET = "webdataset-test";
    static S3MockServer s3;

    @BeforeAll
    static void upload(S3MockServer server) {
        s3 = server;
        s3.createBucket(BUCKET);
        for (int s = 0; s < 3; s++) s3.putObject(BUCKET, "wds/v1/shard-00" + s + ".tar", Tars.tar(shard(s, 2 + s)));
        s3.putObject(BUCKET, "wds/v1/shard-009.txt", "not a shard".getBytes(StandardCharsets.UTF_8));
        s3.putObject(BUCKET, "wds/v1/deeper/shard-005.tar", Tars.tar(shard(5, 1)));
        s3.putObject(BUCKET, "wds/v1/other.tar", Tars.tar(shard(7, 1)));
        var numbered = new ArrayList<Member>();
        numbered.add(new Member("k.json", json("k")));
        for (int n = 11; n >= 0; n--) numbered.add(new Member("k." + n + ".png", image(n)));
        numbered.add(Member.text("t.txt", "text only"));
        s3.putObject(BUCKET, "wds/v1/numbered.tar", Tars.tar(numbered));
        s3.putObject(BUCKET, "wds/v1/video.tar", Tars.tar(List.of(new Member("v.json", json("v")), new Member("v.mp4", VIDEO),
                new Member("v.jpg", image(3)))));
        // audio members (issue 32): two numbered clips, in reverse order in the tar, and a video between json and clips
        s3.putObject(BUCKET, "wds/v1/audio.tar", Tars.tar(List.of(new Member("a.json", json("a")), new Member("a.1.mp3", CLIP_B),
                new Member("a.0.wav", CLIP_A), new Member("a.jpg", image(4)), new Member("b.json", json("b")), new Member("b.mp4", VIDEO),
                new Member("b.flac", CLIP_B))));
    }

    /** Audio members' bytes: none alike (the format does not look inside them). */
    static final byte[] CLIP_A = new byte[300_000], CLIP_B = new byte[70_001];

    static {
        new java.util.Random(32).nextBytes(CLIP_A);
        new java.util.Random(33).nextBytes(CLIP_B);
    }

    /** A video member's bytes: 3.5 MiB, none alike. */
    static final byte[] VIDEO = new byte[7 << 19];

    static {
        new java.util.Random(29).nextBytes(VIDEO);
    }

    static ObjectSource open(String pattern) {
        var config = SourceConfig.builder().endpointOverride(s3.endpoint()).pathStyle(true).credentials("test-key", "test-secret").build();
        return ObjectSources.open("s3://" + BUCKET + "/wds/v1/" + pattern, config);
    }

    @Test
    void aGlobIsListedAndABracePatternNamesTheSameShards() throws Exception {
        List<String> ids = new ArrayList<>();
        for (String pattern : List.of("shard-*.tar", "shard-{000..002}.tar", "shard-00?.tar")) {
            try (var source = open(pattern)) {
                var records = records(source, null);
                assertEquals(9, records.size(), pattern);
                var these = new ArrayList<String>();
                for (int i = 0; i < records.size(); i++) these.add(records.id(i));
                if (ids.isEmpty()) ids.addAll(these);
                assertEquals(ids, these, pattern);
                for (int i = 0; i < records.size(); i++) {
                    String key = records.id(i).substring(records.id(i).indexOf(':') + 1);
                    var r = get(records, i);
                    assertArrayEquals(json(key), r.json(), key);
                    assertArrayEquals(image((key.charAt(1) - '0') + (key.charAt(3) - '0')), r.images().getFirst().bytes(), key);
                }
            }
        }
        assertEquals("shard-000.tar:s0-0", ids.getFirst());
        assertEquals("shard-002.tar:s2-3", ids.getLast());
    }

    @Test
    void numberedImagesComeInNumericOrderByOneRangedGet() throws Exception {
        try (var source = open("numbered.tar")) {
            var records = records(source, null);
            assertEquals(2, records.size());
            long before = source.metrics().requests();
            var r = get(records, 0);
            assertEquals(1, source.metrics().requests() - before, "json and images by one ranged GET");
            assertEquals(12, r.images().size());
            for (int n = 0; n < 12; n++) {
                assertEquals("k." + n + ".png", r.images().get(n).name());
                assertArrayEquals(image(n), r.images().get(n).bytes());
            }
            var e = WebDatasetFormatTest.failure(records, 1);
            assertTrue(e.getMessage().contains("numbered.tar:t has no .json member"), e.getMessage());
        }
    }

    /**
     * Audio members are read with their sample from S3: json, image and clips together by one ranged GET, each clip's bytes
     * whole and in numeric order; beyond a video member (not fetched) by a GET each.
     */
    @Test
    void audioMembersComeWithTheirSampleByRangedGets() throws Exception {
        try (var source = open("audio.tar")) {
            var records = records(source, null);
            assertEquals(2, records.size());
            long before = source.metrics().requests();
            var a = get(records, 0);
            assertEquals(1, source.metrics().requests() - before, "json, clips and image by one ranged GET");
            assertArrayEquals(json("a"), a.json());
            assertEquals(List.of("a.0.wav", "a.1.mp3"), a.audioNames());
            assertArrayEquals(CLIP_A, a.audios().get(0).bytes());
            assertArrayEquals(CLIP_B, a.audios().get(1).bytes());
            assertArrayEquals(image(4), a.images().getFirst().bytes());
            before = source.metrics().requests();
            long bytes = source.metrics().bytesFetched();
            var b = get(records, 1);
            assertEquals(2, source.metrics().requests() - before, "the json and the clip, not the video between them");
            assertTrue(source.metrics().bytesFetched() - bytes < 1 << 20, "the video was not fetched");
            assertEquals(List.of("b.mp4"), b.videoNames());
            assertEquals(List.of("b.flac"), b.audioNames());
            assertArrayEquals(CLIP_B, b.audios().getFirst().bytes());
        }
    }

    /**
     * A video member is not fetched with its sample (its json and image are, by a GET each: the video lies between them),
     * and is read by ranged GETs of 1 MiB blocks where it is read: its last bytes by one GET of its last block.
     */
    @Test
    void aVideoMemberIsReadByRangedGetsWhereItIsRead() throws Exception {
        try (var source = open("video.tar")) {
            var records = records(source, null);
            long requests = source.metrics().requests(), bytes = source.metrics().bytesFetched();
            var r = get(records, 0);
            assertEquals(2, source.metrics().requests() - requests, "the json and the image, not the video between them");
            assertTrue(source.metrics().bytesFetched() - bytes < 1 << 20, "the video was not fetched");
            assertArrayEquals(image(3), r.images().getFirst().bytes());
            assertEquals(List.of("v.mp4"), r.videoNames());
            try (var v = r.videos().getFirst().open()) {
                var ranged = (RangedObjectBytes) v;
                assertEquals(VIDEO.length, v.sizeBytes());
                byte[] tail = new byte[100];
                assertEquals(100, v.read(VIDEO.length - 100, java.lang.foreign.MemorySegment.ofArray(tail)));
                assertArrayEquals(java.util.Arrays.copyOfRange(VIDEO, VIDEO.length - 100, VIDEO.length), tail);
                assertEquals(1, ranged.fetches());
                assertEquals(VIDEO.length - 3 * RangedObjectBytes.BLOCK_BYTES, ranged.bytesFetched(), "the last, half block");
            }
        }
    }

    @Test
    void missingShardsAndEmptyGlobsAreNamed() {
        try (var source = open("shard-{000..004}.tar")) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("shard-003.tar") && e.getMessage().contains("not found"), e.getMessage());
        }
        try (var source = open("train-*.tar")) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("no shard matches train-*.tar in s3://" + BUCKET + "/wds/v1/"), e.getMessage());
        }
    }
}
