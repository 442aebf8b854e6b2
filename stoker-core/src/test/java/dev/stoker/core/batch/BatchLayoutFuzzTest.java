package dev.stoker.core.batch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import java.lang.foreign.MemorySegment;
import org.junit.jupiter.api.Timeout;

/**
 * Fuzzes the {@code STKB} batch reader ({@link BatchLayout#read}), which a Java trainer ({@code TrainerClient}) runs on
 * every BATCH frame and REF segment a service sends, with bytes a broken or hostile service could send.
 *
 * <p>The contract checked on every input: a {@link BatchLayout.Batch} whose every tensor lies inside the batch and
 * whose bytes are exactly its shape's element count times its element size (no shape that claims more elements than
 * its bytes hold), or an {@link IllegalArgumentException} with a message; never another exception. The accessors a
 * client calls next ({@code sampleIndex}, {@code pixelNorm}, each tensor's values) give values or an
 * {@link IllegalArgumentException}/{@link IllegalStateException} naming what is missing or mistyped.
 *
 * <p>Without {@code JAZZER_FUZZ} this runs the checked-in corpus ({@code BatchLayoutFuzzTestInputs/batch/}) as
 * regression tests; with it (the {@code fuzz} Maven profile) Jazzer mutates it, coverage-guided. {@code @Timeout} is
 * each input's limit.
 */
@Timeout(10)
class BatchLayoutFuzzTest {
    @FuzzTest(maxDuration = "10s")
    void batch(byte[] data) {
        var src = MemorySegment.ofArray(data);
        BatchLayout.Batch batch;
        try {
            batch = BatchLayout.read(src);
        } catch (IllegalArgumentException refused) {
            assertNotNull(refused.getMessage(), "a refusal says why");
            assertFalse(refused.getMessage().isBlank(), "a refusal says why");
            return;
        }
        assertTrue(batch.totalBytes() >= BatchLayout.HEADER_BYTES && batch.totalBytes() <= data.length, "total " + batch.totalBytes());
        for (Tensor t : batch.tensors()) {
            // a shape with a zero is empty, whatever its other dimensions; any other whose count overflows is a bug
            long elements = java.util.Arrays.stream(t.shape()).anyMatch(d -> d == 0) ? 0 : 1;
            for (long d : t.shape()) if (elements != 0) elements = Math.multiplyExact(elements, d);
            assertEquals(Math.multiplyExact(elements, t.dtype().byteSize()), t.data().byteSize(),
                    t.name() + ": bytes must be exactly its shape's elements");
            long offset = t.data().address() - src.address();
            assertTrue(offset >= 0 && offset + t.data().byteSize() <= batch.totalBytes(), t.name() + " lies outside the batch");
            switch (t.dtype()) {
                case FLOAT32 -> assertEquals(elements, t.toFloats().length);
                case INT64 -> assertEquals(elements, t.toLongs().length);
                case INT32 -> assertEquals(elements, t.toInts().length);
                case UINT8 -> assertEquals(elements, t.toBytes().length);
            }
        }
        assertEquals(batch.tensors().size(), batch.inputs().size() + batch.metadata().size());
        try {
            batch.sampleIndex();
            batch.pixelNorm();
            batch.pixelPatch();
        } catch (IllegalArgumentException | IllegalStateException missingOrMistyped) {
            assertNotNull(missingOrMistyped.getMessage());
        }
    }
}
