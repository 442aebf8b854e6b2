package dev.stoker.parquet;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.source.ObjectSources;
import dev.stoker.source.SampleFormat;
import dev.stoker.source.SourceConfig;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/** Parquet files on a real S3 API (S3Mock): ranged GETs for the footers and the row groups. */
@ExtendWith(S3MockExtension.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ParquetS3Test {
    static final String BUCKET = "parquet-test";

    @TempDir Path tmp;

    @Test
    void recordsFromS3EqualTheLocalFiles(S3MockServer s3) throws Exception {
        s3.createBucket(BUCKET);
        Path a = HfParquet.write(tmp.resolve("train-00000.parquet"), HfParquet.STRING_MESSAGES, ParquetRecordsTest.rows(0, 9), 4);
        Path b = HfParquet.write(tmp.resolve("train-00001.parquet"), HfParquet.STRING_MESSAGES, ParquetRecordsTest.rows(9, 6), 4);
        s3.putObject(BUCKET, "hf/data/train-00000.parquet", Files.readAllBytes(a));
        s3.putObject(BUCKET, "hf/data/train-00001.parquet", Files.readAllBytes(b));
        var config = SourceConfig.builder().endpointOverride(s3.endpoint()).pathStyle(true).credentials("test-key", "test-secret").build();
        try (var remote = ObjectSources.open("s3://" + BUCKET + "/hf/data/train-{00000..00001}.parquet", config);
             var local = ObjectSources.open(tmp.resolve("train-*.parquet").toString(), config)) {
            var s3Records = (ParquetRecords) SampleFormat.records(remote, "train", null);
            var localRecords = SampleFormat.records(local, "train", null);
            assertEquals(15, s3Records.size());
            assertEquals(5, s3Records.rowGroups(), "4 + 4 + 1 and 4 + 2 rows");
            assertEquals(2, s3Records.rangeReads(), "one ranged GET per footer");
            for (int i : ParquetRecordsTest.shuffled(15, 3)) {
                var r = s3Records.record(i).get(60, TimeUnit.SECONDS);
                var l = localRecords.record(i).get(60, TimeUnit.SECONDS);
                assertEquals(localRecords.id(i), s3Records.id(i));
                assertArrayEquals(l.json(), r.json(), "record " + i);
                assertEquals(l.images().size(), r.images().size());
                for (int k = 0; k < l.images().size(); k++) {
                    assertEquals(l.images().get(k).name(), r.images().get(k).name());
                    assertArrayEquals(l.images().get(k).bytes(), r.images().get(k).bytes());
                }
            }
            assertEquals(5, s3Records.rowGroupReads());
            assertTrue(s3Records.rangeReads() <= 2 + 5 * 4, "a few ranged GETs per row group: " + s3Records.rangeReads());
        }
        try (var remote = ObjectSources.open("s3://" + BUCKET + "/hf/data/train-*.parquet", config); var local = local(config)) { // a glob by ListObjectsV2
            var globbed = SampleFormat.records(remote, "train", null);
            assertEquals(15, globbed.size());
            assertEquals(SampleFormat.records(local, "train", null).id(14), globbed.id(14), "the same files in the same order");
        }
        try (var remote = ObjectSources.open("s3://" + BUCKET + "/hf/data/none-*.parquet", config)) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(remote, "x", null));
            assertTrue(e.getMessage().contains("no file matches"), e.getMessage());
        }
        try (var remote = ObjectSources.open("s3://" + BUCKET + "/hf/data/train-{00000..00002}.parquet", config)) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(remote, "x", null));
            assertTrue(e.getMessage().contains("train-00002.parquet"), e.getMessage());
        }
    }

    private dev.stoker.source.ObjectSource local(SourceConfig config) {
        return ObjectSources.open(tmp.resolve("train-*.parquet").toString(), config);
    }
}
