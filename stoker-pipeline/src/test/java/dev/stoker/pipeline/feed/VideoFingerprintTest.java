package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoKey;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A job's video encoding in its fingerprint (issue 29): a job without video keeps the text it had (a state saved before
 * video existed still resumes), whatever reason it gives for refusing video; a job with video adds the encoding and the
 * decoder path, so two video settings that make other tensors never share a fingerprint; the decode deadline, which
 * changes no tensor, is left out.
 */
@Timeout(60)
class VideoFingerprintTest {
    private static final EncodeOptions IMAGES = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 50176);

    private static VideoEncoding video(VideoSampler sampler, VideoOptions options, VideoContract contract, CpuCapability cpu, long timeout) {
        return new VideoEncoding(sampler, options, null, contract, cpu, timeout);
    }

    @Test
    void aJobWithoutVideoKeepsItsText() {
        String text = Feeder.encodingText(IMAGES);
        assertFalse(text.contains("video"), text);
        assertEquals(text, Feeder.encodingText(IMAGES.withVideoRefused("video tokens are known for transformers 4.57 and 5.18, not 5.10")));
        assertEquals(text, Feeder.encodingText(IMAGES.withVideo(VideoEncoding.defaults()).withVideoRefused(null)));
    }

    @Test
    void everyVideoSettingThatChangesTensorsChangesTheText() {
        long t = VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS;
        var base = video(VideoSampler.HF, VideoOptions.DEFAULTS, VideoContract.OFFICIAL, CpuCapability.AVX2, t);
        String text = Feeder.encodingText(IMAGES.withVideo(base));
        assertTrue(text.startsWith(Feeder.encodingText(IMAGES) + ";video=VideoEncoding[sampler=hf, options={}, processor=none, "
                + "contract=OFFICIAL, cpu=AVX2];decoder="), text);
        assertTrue(text.endsWith(VideoEncoding.decoderPath()), "the decoder path of this JVM: " + text);
        var others = new java.util.ArrayList<String>();
        others.add(Feeder.encodingText(IMAGES.withVideo(video(VideoSampler.QWEN_VL_UTILS, VideoOptions.DEFAULTS, VideoContract.OFFICIAL,
                CpuCapability.AVX2, t))));
        others.add(Feeder.encodingText(IMAGES.withVideo(video(VideoSampler.HF, VideoOptions.DEFAULTS.with(VideoKey.FPS, 1),
                VideoContract.OFFICIAL, CpuCapability.AVX2, t))));
        others.add(Feeder.encodingText(IMAGES.withVideo(video(VideoSampler.HF, VideoOptions.DEFAULTS, VideoContract.TRANSFORMERS_5_18,
                CpuCapability.AVX2, t))));
        others.add(Feeder.encodingText(IMAGES.withVideo(video(VideoSampler.HF, VideoOptions.DEFAULTS, VideoContract.OFFICIAL,
                CpuCapability.DEFAULT, t))));
        others.add(Feeder.encodingText(IMAGES.withVideo(new VideoEncoding(VideoSampler.HF, VideoOptions.DEFAULTS,
                VideoOptions.DEFAULTS.with(VideoKey.MAX_PIXELS, 50176), VideoContract.OFFICIAL, CpuCapability.AVX2, t))));
        for (String other : others) assertNotEquals(text, other);
        assertEquals(others.size(), new java.util.HashSet<>(others).size(), "each setting its own text");
        assertEquals(text, Feeder.encodingText(IMAGES.withVideo(video(VideoSampler.HF, VideoOptions.DEFAULTS, VideoContract.OFFICIAL,
                CpuCapability.AVX2, 5_000_000_000L))), "the deadline changes which videos fail, not a tensor");
    }
}
