package dev.stoker.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A sample's error: its kind (error or filtered) and the class of its cause, which counts are grouped by. */
@Timeout(60)
class SampleExceptionTest {
    @Test
    void theReasonIsTheMessageWithoutItsDetailPathsAndNumbers() {
        assertEquals("file not found", SampleException.reasonOf("file not found: /data/ds/images/missing_7.jpg"));
        assertEquals("object not found", SampleException.reasonOf("object not found: s3://b/ds/x.jpg (404 NoSuchKey)"));
        assertEquals("height:N or width:N must be larger than factor:N",
                SampleException.reasonOf("height:5 or width:5 must be larger than factor:28"));
        assertEquals("absolute aspect ratio must be smaller than N, got N", SampleException.reasonOf("absolute aspect ratio must be smaller than 200, got 206.9"));
        assertEquals("image path … leads out of the data set root … through a symlink",
                SampleException.reasonOf("image path /a/b.jpg leads out of the data set root /a/ds through a symlink"));
        assertEquals("Premature end of JPEG file", SampleException.reasonOf("Premature end of JPEG file"));
        // a video named first is classed by its cause, whatever its name
        assertEquals("video: file not found", SampleException.reasonOf("video a/nowhere.mp4: file not found: /data/a/nowhere.mp4"));
        assertEquals("video: cannot open the container", SampleException.reasonOf("video cut.mp4: cannot open the container: "
                + "Invalid data found when processing input (FFmpeg: moov atom not found)"));
        assertEquals("video needs --pixel-format floatN", SampleException.reasonOf("video needs --pixel-format float32: the compact uint8 format"),
                "not a video's name: as before");
        assertTrue(SampleException.reasonOf("video x.mp4: " + "word ".repeat(40)).length() <= SampleException.REASON_MAX_CHARS);
        assertEquals("unknown", SampleException.reasonOf(null));
        assertEquals("unknown", SampleException.reasonOf("  "));
        String longer = SampleException.reasonOf("word ".repeat(40));
        assertEquals(SampleException.REASON_MAX_CHARS, longer.length(), longer);
        assertTrue(longer.endsWith("…"), longer);
    }

    @Test
    void samplesAreErrorsUnlessALimitFiltersThemAndACopyKeepsKindAndReason() {
        var broken = new SampleException("s1", SampleException.Stage.FETCH, "file not found: /x/y.jpg");
        assertEquals(SampleException.Kind.ERROR, broken.kind());
        assertEquals("file not found", broken.reason());

        var tooLong = SampleException.filtered("s2", SampleException.Stage.TOKENIZE, "over --max-seq-len",
                "sequence has 9000 tokens, over the limit of 8192 (1 image(s))");
        assertEquals(SampleException.Kind.FILTERED, tooLong.kind());
        assertEquals("over --max-seq-len", tooLong.reason());
        assertEquals("s2: tokenize: sequence has 9000 tokens, over the limit of 8192 (1 image(s))", tooLong.describe());

        var renamed = tooLong.withSampleId("s2 (a.jpg)");
        assertEquals("s2 (a.jpg)", renamed.sampleId());
        assertEquals(SampleException.Kind.FILTERED, renamed.kind());
        assertEquals("over --max-seq-len", renamed.reason());
        assertEquals(tooLong.getMessage(), renamed.getMessage());
        assertSame(tooLong, tooLong.withSampleId("s2"));
        assertEquals("filtered", SampleException.Kind.FILTERED.label());
    }
}
