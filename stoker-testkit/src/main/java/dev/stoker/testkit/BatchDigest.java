package dev.stoker.testkit;

import dev.stoker.core.batch.BatchLayout;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;

/**
 * A batch's identity for tests that compare runs batch by batch: SHA-256 over every tensor's name,
 * shape and bytes, in the batch's order (so two batches with the same tensors in another order
 * differ), model inputs and metadata alike, the first 12 bytes in hex, then the metadata's
 * {@code sample_index} values. The Python client's
 * integration script computes the same ({@code fetch_batches.py take}).
 */
public final class BatchDigest {
    private BatchDigest() {}

    public static String of(BatchLayout.Batch b) {
        try {
            var md = MessageDigest.getInstance("SHA-256");
            for (var t : b.tensors()) {
                md.update(t.name().getBytes(StandardCharsets.UTF_8));
                md.update(Arrays.toString(t.shape()).getBytes(StandardCharsets.UTF_8));
                md.update(t.data().asByteBuffer());
            }
            return HexFormat.of().formatHex(md.digest(), 0, 12) + " " + Arrays.toString(b.sampleIndex());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
