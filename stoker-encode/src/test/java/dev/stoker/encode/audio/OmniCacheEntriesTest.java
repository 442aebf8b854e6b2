package dev.stoker.encode.audio;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.stoker.audio.WhisperLogMel;
import dev.stoker.core.AudioPreset;
import dev.stoker.text.OmniSequence;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The audio entries' layouts (docs/cache.md): a token entry with integer or Qwen3-Omni's float positions, a clip's head
 * and a clip's length, each read back as written, and bytes of another length or layout refused (the clip then decoded,
 * the tokens built again) rather than misread.
 */
@Timeout(30)
class OmniCacheEntriesTest {
    @Test
    void tokenEntriesKeepIntegerAndFloatPositions() {
        long[] ids = {151644, 872, 198, 151647}, labels = {-100, -100, 198, 151647};
        var ints = new OmniSequence.Features(ids, labels, new long[] {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, null, 2);
        var back = OmniEncoder.textEntry(OmniEncoder.textBytes(ints), false);
        assertArrayEquals(ids, back.inputIds());
        assertArrayEquals(labels, back.labels());
        assertArrayEquals(ints.positions(), back.positions());
        assertNull(back.floatPositions());
        assertEquals(2, back.keptMedia());

        float[] pos = {0f, 1f, 1.5f, 2.25f, 0f, 1f, 1.5f, 2.25f, 0f, 1f, 3.75f, -0f};
        var floats = new OmniSequence.Features(ids, labels, null, pos, 1);
        byte[] entry = OmniEncoder.textBytes(floats);
        assertEquals(8 + 28 * ids.length, entry.length, "28 bytes a token: two int64 and three float32");
        var f = OmniEncoder.textEntry(entry, true);
        assertArrayEquals(pos, f.floatPositions());
        assertNull(f.positions());
        assertArrayEquals(ids, f.inputIds());
        assertNull(OmniEncoder.textEntry(entry, false), "a float entry is not read as an integer one");
        assertNull(OmniEncoder.textEntry(java.util.Arrays.copyOf(entry, entry.length - 4), true), "a short entry is refused");
    }

    @Test
    void clipAndLengthEntriesReadBackAsWritten() {
        int frames = 7, valid = 5;
        float[] values = new float[AudioPreset.MEL_BINS * frames];
        for (int i = 0; i < values.length; i++) values[i] = (float) Math.sin(i) * 0.7f;
        byte[] entry = OmniEncoder.clipBytes(880, new WhisperLogMel.Features(values, frames, valid));
        var back = OmniEncoder.clip(entry);
        assertEquals(880, back.samples());
        assertEquals(frames, back.head().frames());
        assertEquals(valid, back.head().validFrames());
        assertArrayEquals(values, back.head().values());
        assertNull(OmniEncoder.clip(java.util.Arrays.copyOf(entry, entry.length - 1)), "a short clip entry is refused");
        // a head holds at most three frames past the valid ones (WhisperLogMel.headFrames)
        float[] tooMany = new float[AudioPreset.MEL_BINS * 9];
        assertNull(OmniEncoder.clip(OmniEncoder.clipBytes(880, new WhisperLogMel.Features(tooMany, 9, 5))));

        assertEquals(123_456, OmniEncoder.length(OmniEncoder.lengthBytes(123_456)));
        assertEquals(-1, OmniEncoder.length(OmniEncoder.lengthBytes(0)));
        assertEquals(-1, OmniEncoder.length(new byte[7]));
    }
}
