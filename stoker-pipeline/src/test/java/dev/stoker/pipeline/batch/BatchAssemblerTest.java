package dev.stoker.pipeline.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.SampleException;
import dev.stoker.pipeline.EncodedSample;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.pipeline.schedule.ScheduledBatch;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class BatchAssemblerTest {
    private static final long P = 151643;
    private static final long I = -100;

    private static long[] positions(int base, int n) {
        long[] p = new long[3 * n];
        for (int c = 0; c < 3; c++) for (int l = 0; l < n; l++) p[c * n + l] = base + 10 * c + l;
        return p;
    }

    private static final EncodedSample S0 = new EncodedSample("s0", new long[] {10, 151655, 12}, new long[] {I, I, 12},
            new long[] {1, 1, 1}, positions(0, 3), new float[] {1, 2, 3, 4, 5, 6, 7, 8}, 4, new long[] {1, 2, 1}, 100);
    /** Holds a literal <|endoftext|> inside its text, which the official collator masks too. */
    private static final EncodedSample S1 = new EncodedSample("s1", new long[] {20, 21, 22, P, 24}, new long[] {I, I, 22, I, 24},
            new long[] {1, 1, 1, 1, 1}, positions(100, 5), new float[0], 4, new long[0], 0);
    private static final EncodedSample S2 = new EncodedSample("s2", new long[] {30}, new long[] {30},
            new long[] {1}, positions(200, 1), new float[] {9, 10, 11, 12}, 4, new long[] {1, 1, 1}, 50);

    private static ScheduledBatch scheduled(int size) {
        return new ScheduledBatch(new ScheduleCursor(2, 16), 4, 9, 1, new int[size]);
    }

    @Test
    void padsLikeTheOfficialCollator() {
        var skipped = new SkippedSample("s9", 9, SampleException.Stage.DECODE, "truncated");
        var b = new BatchAssembler().assemble(scheduled(4), new int[] {7, 3, 5}, List.of(S0, S1, S2), List.of(skipped));
        assertEquals(3, b.samples());
        assertEquals(5, b.length());
        assertEquals(4, b.scheduled());
        assertEquals(1, b.skipped());
        assertEquals(List.of(skipped), b.skippedSamples());
        assertEquals(List.of("s0", "s1", "s2"), b.sampleIds());
        assertArrayEquals(new int[] {7, 3, 5}, b.datasetIndices());
        assertEquals(2, b.epoch());
        assertEquals(4, b.step());
        assertEquals(9, b.globalStep());
        assertEquals(1, b.rank());
        assertArrayEquals(new long[] {10, 151655, 12, P, P, 20, 21, 22, P, 24, 30, P, P, P, P}, b.inputIds());
        assertArrayEquals(new long[] {I, I, 12, I, I, I, I, 22, I, 24, 30, I, I, I, I}, b.labels());
        assertArrayEquals(new long[] {1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0}, b.attentionMask());
        assertArrayEquals(new long[] {
                0, 1, 2, 1, 1, 100, 101, 102, 103, 104, 200, 1, 1, 1, 1,
                10, 11, 12, 1, 1, 110, 111, 112, 113, 114, 210, 1, 1, 1, 1,
                20, 21, 22, 1, 1, 120, 121, 122, 123, 124, 220, 1, 1, 1, 1}, b.positionIds());
        assertArrayEquals(new float[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b.pixelValues());
        assertArrayEquals(new long[] {1, 2, 1, 1, 1, 1}, b.imageGridThw());
        assertEquals(new BatchShape(3, 5, 3, 4, 2), b.shape());
        // the STKB layout: a 64-byte header, 7 descriptors of 128 (960) and the resume block (1056: 2048 in all, aligned), then
        // each tensor at a 64-aligned offset:
        // input_ids, labels, attention_mask 120 → 128 each, position_ids 360 → 384, pixel_values 48, image_grid_thw 48,
        // sample_index 24 → 64 each
        assertEquals(2048 + 3 * 128 + 384 + 3 * 64, b.sizeBytes());
    }

    @Test
    void allSamplesFailedGivesAnEmptyBatch() {
        var gone = List.of(new SkippedSample("a", 0, SampleException.Stage.FETCH, "404"), new SkippedSample("b", 1, SampleException.Stage.MANIFEST, "bad JSON"));
        var b = new BatchAssembler().assemble(scheduled(2), new int[0], List.of(), gone);
        assertEquals(0, b.samples());
        assertEquals(0, b.length());
        assertEquals(2, b.skipped());
        assertEquals(0, b.inputIds().length);
        assertEquals(0, b.positionIds().length);
        assertEquals(0, b.pixelValues().length);
        assertEquals(2048, b.sizeBytes(), "the header, descriptors and resume block of seven empty tensors");
    }

    @Test
    void refusesMismatchedRowLengthsAndCounts() {
        var other = new EncodedSample("x", new long[] {1}, new long[] {1}, new long[] {1}, positions(0, 1),
                new float[6], 6, new long[] {1, 1, 1}, 1);
        var a = new BatchAssembler();
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(2), new int[2], List.of(S0, other), List.of()));
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(2), new int[1], List.of(S0, S2), List.of()));
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(1), new int[2], List.of(S0, S2), List.of()));
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(3), new int[2], List.of(S0, S2), List.of()));
    }
}
