package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.source.Tars.Member;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** WebDataset tar shards on local files: patterns, samples and their members, broken shards and samples, the index cache. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class WebDatasetFormatTest {
    @TempDir Path tmp;

    static byte[] json(String id) {
        return ("{\"id\": \"" + id + "\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\nhi\"}, "
                + "{\"from\": \"gpt\", \"value\": \"yes\"}]}").getBytes(StandardCharsets.UTF_8);
    }

    static byte[] image(int k) { return TestData.image(TestData.imageNames().get(k % TestData.imageNames().size())); }

    /** Shard {@code s} of {@code n} samples: key {@code s<s>-<i>}, a json member and one image. */
    static List<Member> shard(int s, int n) {
        var members = new ArrayList<Member>();
        for (int i = 0; i < n; i++) {
            String key = "s" + s + "-" + i;
            members.add(new Member(key + ".json", json(key)));
            members.add(new Member(key + ".jpg", image(s + i)));
        }
        return members;
    }

    static ObjectSource open(Path path) { return ObjectSources.open(path.toString(), SourceConfig.defaults()); }

    static WebDatasetRecords records(ObjectSource source, ManifestRecords.IndexCache cache) throws IOException {
        String uri = source.location().manifestUri();
        var records = SampleFormat.records(source, uri.substring(uri.lastIndexOf('/') + 1), cache);
        return assertInstanceOf(WebDatasetRecords.class, records, "a .tar URI is read as WebDataset shards");
    }

    static SampleRecords.Record get(SampleRecords records, int i) throws Exception {
        return records.record(i).get(20, TimeUnit.SECONDS);
    }

    static SampleException failure(SampleRecords records, int i) throws Exception {
        var e = assertThrows(ExecutionException.class, () -> records.record(i).get(20, TimeUnit.SECONDS));
        var se = assertInstanceOf(SampleException.class, e.getCause());
        assertEquals(SampleException.Stage.MANIFEST, se.stage());
        return se;
    }

    @Test
    void formatIsChosenByTheUrisLastSegment() {
        var f = new WebDatasetFormat();
        assertEquals("webdataset", f.name());
        assertTrue(f.reads("s3://b/ds/shard-{000..099}.tar"));
        assertTrue(f.reads("/data/shard-*.tar"));
        assertTrue(f.reads("file:///data/x.tar"));
        assertTrue(f.reads("file:///data/shard-0?.tar"));
        assertTrue(f.reads("/data/x.tar.gz"), "claimed to be refused clearly");
        assertFalse(f.reads("/data/train.jsonl"));
        assertFalse(f.reads("/data/tar/train.json"));
        assertFalse(f.reads("/data/x.tar/train.jsonl"));
    }

    @Test
    void braceExpansion() {
        assertEquals(List.of("s-000.tar", "s-001.tar", "s-002.tar"), ShardPattern.expandBraces("s-{000..002}.tar"));
        assertEquals(List.of("s-8.tar", "s-9.tar", "s-10.tar"), ShardPattern.expandBraces("s-{8..10}.tar"));
        assertEquals(List.of("s-10.tar", "s-09.tar", "s-08.tar"), ShardPattern.expandBraces("s-{10..08}.tar"));
        assertEquals(List.of("a-0.tar", "a-1.tar", "b-0.tar", "b-1.tar"), ShardPattern.expandBraces("{a,b}-{0..1}.tar"));
        assertEquals(List.of("x{y}.tar"), ShardPattern.expandBraces("x{y}.tar"));
        assertEquals(List.of("a.tar"), ShardPattern.expandBraces("{a,a}.tar"));
        for (String bad : List.of("s-{000..002.tar", "s-}.tar", "s-{a{b}}.tar", "s-{a..b}.tar", "s-{0..99999999}.tar"))
            assertThrows(IllegalArgumentException.class, () -> ShardPattern.expandBraces(bad), bad);
    }

    @Test
    void aBracePatternNamesItsShardsAndEachMustExist() throws Exception {
        for (int s = 0; s < 3; s++) Tars.write(tmp.resolve("shard-00" + s + ".tar"), shard(s, 2 + s));
        try (var source = open(tmp.resolve("shard-{000..002}.tar"))) {
            var records = records(source, null);
            org.junit.jupiter.api.Assertions.assertFalse(records.mayHoldVideo(), "a shard of images: no video (--video auto)");
            assertEquals(2 + 3 + 4, records.size());
            assertEquals("shard-000.tar:s0-0", records.id(0));
            assertEquals("shard-001.tar:s1-0", records.id(2));
            assertEquals("shard-002.tar:s2-3", records.id(8));
            for (int i = 0; i < records.size(); i++) {
                String key = records.id(i).substring(records.id(i).indexOf(':') + 1);
                var r = get(records, i);
                assertArrayEquals(json(key), r.json(), records.id(i));
                assertEquals(1, r.images().size());
                assertEquals(key + ".jpg", r.images().getFirst().name());
                int s = key.charAt(1) - '0', k = key.charAt(3) - '0';
                assertArrayEquals(image(s + k), r.images().getFirst().bytes(), records.id(i));
            }
        }
        try (var source = open(tmp.resolve("shard-{000..003}.tar"))) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("shard-003.tar"), e.getMessage());
        }
    }

    @Test
    void aGlobNamesTheMatchingTarsOfTheFolderByName() throws Exception {
        for (int s : new int[] {2, 0, 1}) Tars.write(tmp.resolve("shard-00" + s + ".tar"), shard(s, 1));
        Tars.write(tmp.resolve("other.tar"), shard(9, 1));
        Files.writeString(tmp.resolve("shard-003.txt"), "not a shard");
        Files.createDirectories(tmp.resolve("shard-004.tar")); // a folder: not listed
        try (var source = open(tmp.resolve("shard-*.tar"))) {
            var records = records(source, null);
            assertEquals(List.of("shard-000.tar:s0-0", "shard-001.tar:s1-0", "shard-002.tar:s2-0"),
                    List.of(records.id(0), records.id(1), records.id(2)));
            assertEquals(3, records.size());
        }
        try (var source = open(tmp.resolve("shard-00?.tar"))) {
            assertEquals(3, records(source, null).size());
        }
        try (var source = open(tmp.resolve("{other,shard-00[12]}*.tar"))) {
            assertEquals(1, records(source, null).size(), "'[' is literal; 'other' matches");
        }
        try (var source = open(tmp.resolve("train-*.tar"))) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("no shard matches train-*.tar"), e.getMessage());
        }
    }

    @Test
    void numberedImagesAreTakenInNumericOrder() throws Exception {
        var members = new ArrayList<Member>();
        members.add(new Member("a/k1.json", json("k1")));
        for (int n : new int[] {10, 2, 0, 9, 1, 11, 3, 4, 5, 6, 7, 8})
            members.add(new Member("a/k1." + n + (n % 2 == 0 ? ".jpg" : ".png"), image(n)));
        members.add(Member.text("a/k1.txt", "ignored"));
        members.add(Member.dir("a/sub/"));
        String longKey = "b/" + "long".repeat(40);
        members.add(new Member(longKey + ".json", json("long")));
        members.add(new Member(longKey + ".WEBP", image(1)));
        Tars.write(tmp.resolve("x.tar"), members);
        try (var source = open(tmp.resolve("x.tar"))) {
            var records = records(source, null);
            assertEquals(2, records.size());
            var r = get(records, 0);
            assertEquals("x.tar:a/k1", records.id(0));
            assertEquals(12, r.images().size());
            for (int n = 0; n < 12; n++) {
                assertEquals("a/k1." + n + (n % 2 == 0 ? ".jpg" : ".png"), r.images().get(n).name());
                assertArrayEquals(image(n), r.images().get(n).bytes(), "image " + n);
            }
            long before = source.metrics().requests();
            var l = get(records, 1);
            assertEquals(1, source.metrics().requests() - before, "a sample is read by one ranged read");
            assertEquals("x.tar:" + longKey, records.id(1));
            assertArrayEquals(json("long"), l.json());
            assertEquals(List.of(longKey + ".WEBP"), l.images().stream().map(SampleRecords.Embedded::name).toList());
        }
    }

    @Test
    void brokenSamplesKeepTheirPlaceAndFailWhenRead() throws Exception {
        Tars.write(tmp.resolve("b.tar"), List.of(
                new Member("ok1.json", json("ok1")), new Member("ok1.jpg", image(0)),
                Member.text("textonly.txt", "no record"), Member.text("textonly.cls", "3"),
                new Member("twojson.json", json("a")), new Member("twojson.JSON", json("b")),
                new Member("mixed.jpg", image(0)), new Member("mixed.0.jpg", image(1)), new Member("mixed.json", json("m")),
                new Member("dup.1.jpg", image(0)), new Member("dup.1.png", image(1)), new Member("dup.json", json("d")),
                new Member("ok2.json", json("ok2")),
                new Member("ok1.txt", "again".getBytes(StandardCharsets.UTF_8)),
                new Member("nojsonimage.jpg", image(2))));
        try (var source = open(tmp.resolve("b.tar"))) {
            var records = records(source, null);
            assertEquals(8, records.size());
            assertEquals(6, records.brokenSamples());
            assertEquals(0, get(records, 0).images().size() - 1);
            assertTrue(failure(records, 1).getMessage().contains("b.tar:textonly has no .json member (its members: .txt, .cls)"),
                    failure(records, 1).getMessage());
            assertEquals("b.tar:textonly", failure(records, 1).sampleId());
            assertTrue(failure(records, 2).getMessage().contains("two json members"), failure(records, 2).getMessage());
            assertTrue(failure(records, 3).getMessage().contains("both an unnumbered image"), failure(records, 3).getMessage());
            assertTrue(failure(records, 4).getMessage().contains("two images numbered 1"), failure(records, 4).getMessage());
            var ok2 = get(records, 5);
            assertArrayEquals(json("ok2"), ok2.json());
            assertEquals(List.of(), ok2.images(), "a record without images names them by reference, if at all");
            assertEquals("b.tar:ok1", records.id(6));
            assertTrue(failure(records, 6).getMessage().contains("comes again after other keys"), failure(records, 6).getMessage());
            assertTrue(failure(records, 7).getMessage().contains("b.tar:nojsonimage has no .json member"), failure(records, 7).getMessage());
        }
    }

    /**
     * Audio members (issue 32) are carried with their sample, after its images and videos (a processor without audio refuses
     * them when it parses the record: SampleParser); other members stay ignored. Every suffix of
     * {@link dev.stoker.core.UnservedMedia} is a medium's member, in any case. Video and audio members named so that they
     * have no place ({@code key.left.mp4}, {@code key.left.wav}) are refused, naming them.
     */
    @Test
    void audioMembersAreCarriedAndUnplaceableMembersFailTheirSample() throws Exception {
        var members = new ArrayList<Member>();
        members.add(new Member("speech.json", json("speech")));
        members.add(new Member("speech.jpg", image(0)));
        members.add(new Member("speech.wav", "RIFF....WAVE".getBytes(StandardCharsets.US_ASCII)));
        members.add(new Member("clip.json", json("clip")));
        members.add(new Member("clip.0.jpg", image(1)));
        members.add(new Member("clip.left.MP4", new byte[] {0, 0, 0, 24, 'f', 't', 'y', 'p'}));
        members.add(new Member("plain.cls", "3".getBytes(StandardCharsets.US_ASCII)));
        members.add(new Member("plain.json", json("plain")));
        members.add(new Member("plain.jpg", image(2)));
        members.add(Member.text("plain.txt", "a caption"));
        members.add(new Member("talk.json", json("talk")));
        members.add(new Member("talk.1.FLAC", new byte[] {'f', 'L', 'a', 'C'}));
        members.add(new Member("talk.0.wav", new byte[] {'R', 'I', 'F', 'F'}));
        members.add(new Member("stray.json", json("stray")));
        members.add(new Member("stray.left.wav", new byte[] {'R'}));
        var suffixes = new ArrayList<String>();
        for (var media : dev.stoker.core.UnservedMedia.values()) suffixes.addAll(media.memberSuffixes());
        for (String suffix : suffixes) members.add(new Member("only-" + suffix + "." + suffix, new byte[] {1, 2, 3}));
        Tars.write(tmp.resolve("av.tar"), members);
        try (var source = open(tmp.resolve("av.tar"))) {
            var records = records(source, null);
            assertEquals(5 + suffixes.size(), records.size());
            assertEquals(2 + suffixes.size(), records.brokenSamples());
            var speech = get(records, 0);
            assertArrayEquals(json("speech"), speech.json());
            assertEquals(List.of("speech.jpg"), speech.imageNames());
            assertEquals(List.of("speech.wav"), speech.audioNames());
            assertArrayEquals("RIFF....WAVE".getBytes(StandardCharsets.US_ASCII), speech.audios().getFirst().bytes());
            var talk = get(records, 3);
            assertEquals(List.of("talk.0.wav", "talk.1.FLAC"), talk.audioNames(), "numbered clips in numeric order");
            assertArrayEquals(new byte[] {'f', 'L', 'a', 'C'}, talk.audios().get(1).bytes());
            assertTrue(talk.images().isEmpty() && talk.videos().isEmpty());
            assertEquals("av.tar:stray has audio member stray.left.wav, named neither stray.wav nor stray.N.wav (a clip Stoker cannot place)",
                    failure(records, 4).getMessage());
            assertEquals("av.tar:clip has video member clip.left.MP4, named neither clip.mp4 nor clip.N.mp4 (a video Stoker cannot place)",
                    failure(records, 1).getMessage());
            var plain = get(records, 2);
            assertArrayEquals(json("plain"), plain.json());
            assertEquals(List.of("plain.jpg"), plain.images().stream().map(SampleRecords.Embedded::name).toList(), ".cls and .txt stay ignored");
            for (int k = 0; k < suffixes.size(); k++) {
                String s = suffixes.get(k);
                assertTrue(failure(records, 5 + k).getMessage().startsWith("av.tar:only-" + s + " has no .json member (its members: ." + s + ")"),
                        failure(records, 5 + k).getMessage());
            }
        }
    }

    /**
     * An index saved by an earlier rule (file version 1 passed audio members' samples without them; 3 refused them) is not
     * used: the shard is indexed again, and its audio member carried.
     */
    @ParameterizedTest
    @ValueSource(ints = {1, 3})
    void anIndexOfAVersionBeforeIsIndexedAgain(int version) throws Exception {
        Tars.write(tmp.resolve("v.tar"), List.of(new Member("a.json", json("a")), new Member("a.jpg", image(0)),
                new Member("a.mp3", new byte[] {'I', 'D', '3'})));
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        try (var source = open(tmp.resolve("v.tar"))) {
            assertEquals(0, records(source, cache).brokenSamples());
        }
        try (var files = Files.list(tmp.resolve("cache"))) {
            for (Path f : files.toList()) {
                byte[] b = Files.readAllBytes(f);
                b[7] = (byte) version; // the version, the int after the magic: an index written by a rule before
                Files.write(f, b);
            }
        }
        try (var source = open(tmp.resolve("v.tar"))) {
            var records = records(source, cache);
            assertFalse(records.fromCache(), "a version-" + version + " index is not used");
            assertEquals(List.of("a.mp3"), get(records, 0).audioNames());
        }
    }

    @Test
    void aTruncatedShardIsRefusedNamingItAndTheByte() throws Exception {
        byte[] whole = Tars.tar(shard(0, 3));
        int cut = 512 + json("s0-0").length + 700; // inside the first image's data
        Files.write(tmp.resolve("t-000.tar"), Arrays.copyOf(whole, cut));
        try (var source = open(tmp.resolve("t-000.tar"))) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("t-000.tar") && e.getMessage().contains("truncated"), e.getMessage());
            assertTrue(e.getMessage().matches("(?s).*byte \\d+.*"), e.getMessage());
        }
        Files.write(tmp.resolve("t-001.tar"), Arrays.copyOf(whole, 512 * 5 + 100)); // inside a header
        try (var source = open(tmp.resolve("t-001.tar"))) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("t-001.tar") && e.getMessage().contains("byte"), e.getMessage());
        }
        Files.write(tmp.resolve("t-002.tar"), "{\"id\": 1}\n".repeat(200).getBytes(StandardCharsets.UTF_8));
        try (var source = open(tmp.resolve("t-002.tar"))) {
            var e = assertThrows(IOException.class, () -> records(source, null));
            assertTrue(e.getMessage().contains("t-002.tar") && e.getMessage().contains("not a tar"), e.getMessage());
        }
    }

    @Test
    void aMemberOverTheLimitFailsItsSampleOnly() throws Exception {
        // a 300 MiB member, the file sparse: one header, the data as a hole, then a tar of the next samples
        Path file = tmp.resolve("big.tar");
        long big = 300L << 20;
        var header = new TarArchiveEntry("huge.jpg");
        header.setSize(big);
        byte[] head = new byte[512];
        header.writeEntryHeader(head);
        byte[] rest = Tars.tar(shard(0, 2));
        try (var f = new RandomAccessFile(file.toFile(), "rw")) {
            f.write(Tars.tar(List.of(new Member("huge.json", json("huge")))), 0, 1024); // its json member, without the end
            f.write(head);
            f.seek(1024 + 512 + big);
            f.write(rest);
        }
        try (var source = open(file)) {
            var records = records(source, null);
            assertEquals(3, records.size());
            var e = failure(records, 0);
            assertTrue(e.getMessage().contains("big.tar:huge has member huge.jpg of " + big + " bytes, over the limit"), e.getMessage());
            assertArrayEquals(json("s0-1"), get(records, 2).json());
        }
    }

    @Test
    void compressedShardsAreRefused() throws Exception {
        Files.write(tmp.resolve("x.tar.gz"), new byte[] {31, -117});
        try (var source = open(tmp.resolve("x.tar.gz"))) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(source, "x.tar.gz", null));
            assertTrue(e.getMessage().contains("compressed tar shards are not read"), e.getMessage());
        }
    }

    @Test
    void multiShardIndexWithAnEmptyShardIsCachedAndRebuiltWhenAShardChanges() throws Exception {
        Tars.write(tmp.resolve("m-0.tar"), shard(0, 3));
        Tars.write(tmp.resolve("m-1.tar"), List.of()); // only the end-of-archive blocks
        Tars.write(tmp.resolve("m-2.tar"), shard(2, 4));
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        byte[] digest;
        List<String> ids = new ArrayList<>();
        try (var source = open(tmp.resolve("m-{0..2}.tar"))) {
            var records = records(source, cache);
            assertFalse(records.fromCache());
            assertEquals(7, records.size());
            for (int i = 0; i < 7; i++) ids.add(records.id(i));
            assertEquals("m-0.tar:s0-2", ids.get(2));
            assertEquals("m-2.tar:s2-0", ids.get(3));
            assertTrue(records.indexBytesPerSample() < 100, "index heap per sample: " + records.indexBytesPerSample());
            digest = records.digest();
            assertEquals(32, digest.length);
        }
        try (var source = open(tmp.resolve("m-{0..2}.tar"))) {
            var records = records(source, cache);
            assertTrue(records.fromCache(), "the second open loads the saved index");
            for (int i = 0; i < 7; i++) assertEquals(ids.get(i), records.id(i));
            assertArrayEquals(digest, records.digest());
            assertArrayEquals(json("s2-3"), get(records, 6).json());
            assertArrayEquals(image(2 + 3), get(records, 6).images().getFirst().bytes());
        }
        Tars.write(tmp.resolve("m-1.tar"), shard(1, 1));
        Files.setLastModifiedTime(tmp.resolve("m-1.tar"), FileTime.fromMillis(System.currentTimeMillis() + 5000));
        try (var source = open(tmp.resolve("m-{0..2}.tar"))) {
            var records = records(source, cache);
            assertFalse(records.fromCache(), "a changed shard is indexed again");
            assertEquals(8, records.size());
            assertEquals("m-1.tar:s1-0", records.id(3));
            assertNotEquals(Arrays.toString(digest), Arrays.toString(records.digest()));
        }
    }

    @Test
    void aCorruptCacheFileIsIndexedAgain() throws Exception {
        Tars.write(tmp.resolve("c.tar"), shard(0, 5));
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        try (var source = open(tmp.resolve("c.tar"))) {
            records(source, cache);
        }
        try (var files = Files.list(tmp.resolve("cache"))) {
            for (Path f : files.toList()) {
                byte[] b = Files.readAllBytes(f);
                Files.write(f, Arrays.copyOf(b, b.length - 7));
            }
        }
        try (var source = open(tmp.resolve("c.tar"))) {
            var records = records(source, cache);
            assertFalse(records.fromCache());
            assertEquals(5, records.size());
            assertArrayEquals(json("s0-4"), get(records, 4).json());
        }
    }

    @Test
    void aShardThatChangesAfterIndexingFailsItsSamplesClearly() throws Exception {
        Path file = Tars.write(tmp.resolve("g.tar"), shard(0, 3));
        try (var source = open(file)) {
            var records = records(source, null);
            Files.write(file, Arrays.copyOf(Files.readAllBytes(file), 1024));
            var e = failure(records, 2);
            assertEquals("g.tar:s0-2", e.sampleId());
            assertTrue(e.getMessage().contains("cannot read g.tar:s0-2 from shard g.tar"), e.getMessage());
        }
    }
}
