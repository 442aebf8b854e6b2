package dev.stoker.pipeline.feed;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.source.mix.FeedSource;
import static dev.stoker.pipeline.feed.FeederTest.assertSameBatches;
import static dev.stoker.pipeline.feed.FeederTest.config;
import static dev.stoker.pipeline.feed.FeederTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.encode.batch.Batch;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.WebDatasetRecords;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The same samples as JSON Lines with image files and as WebDataset tar shards (each line a {@code .json} member,
 * its images members beside it) give the same batches through the Feeder: ids, token ids, labels, masks, positions,
 * grids and pixel values bit for bit.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class WebDatasetFeedTest {
    @TempDir Path tmp;

    /**
     * Writes the JSONL data set's samples as shards of {@code perShard} samples ({@code shard-000.tar}, …): sample i's
     * key {@code 0000i}, its line verbatim as {@code key.json}, its one image as {@code key.<ext>} or its several as
     * {@code key.0.<ext>}, {@code key.1.<ext>}, …, written in reverse order (the reader takes them by number).
     */
    static int writeShards(Path jsonl, Path dir, int perShard) throws IOException {
        var mapper = new ObjectMapper();
        var lines = Files.readAllLines(jsonl).stream().filter(l -> !l.isBlank()).toList();
        int shards = 0;
        for (int from = 0; from < lines.size(); from += perShard, shards++) {
            try (OutputStream out = Files.newOutputStream(dir.resolve(String.format("shard-%03d.tar", shards)));
                 var tar = new TarArchiveOutputStream(out, "UTF-8")) {
                for (int i = from; i < Math.min(lines.size(), from + perShard); i++) {
                    String key = String.format("%05d", i);
                    var node = mapper.readTree(lines.get(i));
                    var refs = new ArrayList<String>();
                    var image = node.get("image");
                    if (image != null && image.isArray()) image.forEach(n -> refs.add(n.asText()));
                    else if (image != null) refs.add(image.asText());
                    put(tar, key + ".json", lines.get(i).getBytes(StandardCharsets.UTF_8));
                    for (int k = refs.size() - 1; k >= 0; k--) {
                        String ref = refs.get(k);
                        String ext = ref.substring(ref.lastIndexOf('.') + 1);
                        put(tar, key + (refs.size() == 1 ? "" : "." + k) + "." + ext, Files.readAllBytes(jsonl.resolveSibling(ref)));
                    }
                }
            }
        }
        return shards;
    }

    private static void put(TarArchiveOutputStream tar, String name, byte[] bytes) throws IOException {
        var e = new TarArchiveEntry(name);
        e.setSize(bytes.length);
        tar.putArchiveEntry(e);
        tar.write(bytes);
        tar.closeArchiveEntry();
    }

    @Test
    void tarShardsGiveTheBatchesOfTheSameJsonLines() throws Exception {
        int n = 17;
        Path jsonl = TestDatasets.write(tmp, n, Set.of());
        Path shardDir = Files.createDirectories(tmp.resolve("wds"));
        assertEquals(3, writeShards(jsonl, shardDir, 7));
        int ranks = 2, batch = 3, steps = 4;
        List<Batch> reference;
        try (var source = new LocalFeedSource(jsonl, 0)) {
            reference = run(config(FeedMode.PREFETCH, ranks, batch, 2), source, steps);
        }
        assertTrue(reference.stream().anyMatch(b -> b.imageGridThw().length > 3), "some batch carries several images");
        for (String pattern : List.of("shard-{000..002}.tar", "shard-*.tar")) {
            try (var objects = ObjectSources.open(shardDir.resolve(pattern).toString(), SourceConfig.defaults())) {
                var source = FeedSource.of(objects, null);
                var records = assertInstanceOf(WebDatasetRecords.class, source.records());
                assertEquals(n, records.size());
                assertEquals("shard-001.tar:00008", records.id(8));
                assertSameBatches(reference, run(config(FeedMode.PREFETCH, ranks, batch, 2), source, steps), "tar shards " + pattern + " vs JSON Lines");
                assertSameBatches(reference, run(config(FeedMode.SERIAL, ranks, batch, 1), source, steps), "tar shards, serial");
            }
        }
    }

    @Test
    void samplesWithoutJsonOrWithBrokenJsonAreSkippedNamedByShardAndKey() throws Exception {
        Path jsonl = TestDatasets.write(tmp, 6, Set.of());
        Path shardDir = Files.createDirectories(tmp.resolve("wds"));
        writeShards(jsonl, shardDir, 6);
        // a second shard: a sample with text only, one whose json does not parse, then a good one
        try (OutputStream out = Files.newOutputStream(shardDir.resolve("shard-001.tar")); var tar = new TarArchiveOutputStream(out, "UTF-8")) {
            put(tar, "lost.txt", "no record".getBytes(StandardCharsets.UTF_8));
            put(tar, "bad.json", "{\"conversations\": [".getBytes(StandardCharsets.UTF_8));
            put(tar, "bad.png", Files.readAllBytes(jsonl.resolveSibling("images/" + Files.readString(jsonl).split("images/")[1].split("\"")[0])));
            put(tar, "kept.json", Files.readAllLines(jsonl).getFirst().replace("\"s0\"", "\"kept\"").getBytes(StandardCharsets.UTF_8));
            put(tar, "kept.jpg", Files.readAllBytes(jsonl.resolveSibling("images/" + Files.readString(jsonl).split("images/")[1].split("\"")[0])));
        }
        try (var objects = ObjectSources.open(shardDir.resolve("shard-*.tar").toString(), SourceConfig.defaults());
             var feeder = Feeder.start(config(FeedMode.SERIAL, 1, 9, 1).withErrorPolicy(ErrorPolicy.SKIP, 1), FeedSource.of(objects, null),
                     SharedTokenizer.get())) {
            Batch b = feeder.rank(0).next().get(60, TimeUnit.SECONDS);
            assertEquals(7, b.samples(), "every sample but the broken ones: " + b.sampleIds());
            assertTrue(b.sampleIds().contains("kept"), b.sampleIds().toString());
            assertEquals(2, b.skippedSamples().size(), b.skippedSamples().toString());
            var byId = new java.util.TreeMap<String, dev.stoker.encode.batch.SkippedSample>();
            for (var s : b.skippedSamples()) byId.put(s.sampleId(), s);
            assertEquals(Set.of("shard-001.tar:lost", "shard-001.tar:bad"), byId.keySet());
            for (var s : byId.values()) assertEquals(SampleException.Stage.MANIFEST, s.stage(), s.toString());
            assertTrue(byId.get("shard-001.tar:lost").cause().contains("no .json member"), byId.get("shard-001.tar:lost").cause());
            assertTrue(byId.get("shard-001.tar:bad").cause().contains("malformed JSON"), byId.get("shard-001.tar:bad").cause());
        }
    }
}
