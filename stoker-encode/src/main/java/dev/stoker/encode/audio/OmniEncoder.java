package dev.stoker.encode.audio;

import dev.stoker.audio.AudioDecoder;
import dev.stoker.audio.WhisperLogMel;
import dev.stoker.core.AudioPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.SampleException.Stage;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.ImagePreprocessor;
import dev.stoker.encode.SampleEncoder.ImageSource;
import dev.stoker.encode.video.VideoPreprocessor;
import dev.stoker.encode.video.VideoTensors;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.text.ChatSample;
import dev.stoker.text.Message;
import dev.stoker.text.OmniSequence;
import dev.stoker.text.OmniTokens;
import dev.stoker.text.QwenTokenizer;
import dev.stoker.video.ffmpeg.Demuxer;
import dev.stoker.video.ffmpeg.StreamInfo;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * One sample of an audio family ({@code --processor qwen2-audio | qwen2.5-omni | qwen3-omni}, issue 32) into its model
 * inputs: each clip decoded to 16 kHz mono ({@link AudioDecoder}: FFmpeg, soxr) and turned into Whisper log-mel features
 * ({@link WhisperLogMel}), each image and video planned and made as under the family's vision half (Qwen2.5-Omni: the
 * Qwen2.5-VL rules; Qwen3-Omni: the same image and video code at patch 16, {@code ProcessorPreset.videoFamily}), then the text, pads and positions of {@link OmniSequence}.
 *
 * <p>The features: {@code input_features} (N, 128, T) float32 and {@code feature_attention_mask} (N, T) int32, N the
 * sample's clips in placeholder order (a video's audio track, under {@code use_audio_in_video}, at the video's place),
 * as the Hugging Face processor stacks them for one sample. {@link AudioEncoding.Pad#VALID}: T is the longest clip's valid
 * frames (100 per second) and a shorter clip's frames past its own are zeros, masked; {@link AudioEncoding.Pad#HF}: every
 * frame the processor computes (Qwen2-Audio 30 s, Qwen2.5-Omni 300 s, Qwen3-Omni the longest clip of the sample), its
 * padding frames as the processor computes them. Either way {@code input_features[mask]} is what the audio encoder reads,
 * and each clip's mask sum is the {@code L} of the family's token rule.
 *
 * <p>Measuring ({@link #shape}) reads each clip's duration from its container header through the FFmpeg binding
 * ({@link StreamInfo#headerDuration()}, the stream's) and never computes features; an MP3, whose header counts the
 * encoder's delay and padding, or a clip whose header has no duration is decoded (not featurized) instead. Measured on
 * clips from the ffmpeg command: WAV (8, 16 kHz), FLAC (16, 22.05 kHz) and Ogg Vorbis give the decoded length exactly;
 * AAC in MP4 within one AAC frame (4.2 s: 420 frames from the header, 421 decoded, the same 105 tokens), since the
 * decoder keeps the last frame's padding that the edit list trims. So {@code validate}'s count is the encoded one but
 * for AAC at a frame edge.
 *
 * <p>Over {@code --max-seq-len}: filtered, or under {@code --truncation truncate} cut but never inside a clip's, image's or
 * video's run ({@link OmniSequence#build(ChatSample, List, int)}); the items past the cut are dropped with their features and
 * pixels. Qwen2-Audio refuses images and videos (naming the item): it has no vision tower.
 *
 * <p>Threading: one instance per thread, as its {@link WhisperLogMel} holds FFT buffers.
 */
public final class OmniEncoder {
    /** The deadline of one clip's decode (a guard against a hung decode, not a slow one). */
    static final long DECODE_TIMEOUT_NANOS = 120_000_000_000L;
    /** The per-item keys of an audio item this encoder reads (qwen-omni-utils' window, in seconds). */
    static final String AUDIO_START = "audio_start", AUDIO_END = "audio_end";

    private final EncodeOptions options;
    private final AudioPreset preset;
    private final AudioEncoding.Pad pad;
    private final OmniSequence sequence;
    /** The tokenizer's identity (the SHA-256 of its tokenizer.json): part of a token entry's key. */
    private final String tokenizerIdentity;
    private final ImagePreprocessor images;
    private final VideoPreprocessor videos;
    private final WhisperLogMel logMel = new WhisperLogMel();

    /**
     * @param images the encoder's image half (its thread's decoder)
     * @param videos the encoder's video half, or null when the job takes no video (then a video record was refused already)
     */
    public OmniEncoder(EncodeOptions options, QwenTokenizer tokenizer, ImagePreprocessor images, VideoPreprocessor videos) {
        this.options = options;
        this.preset = options.audio().preset();
        this.pad = options.audio().pad();
        // a model folder's own template (--chat-template model) renders; the built-in one otherwise (checked equal at start)
        this.sequence = options.chatTemplate() == null ? new OmniSequence(preset, tokenizer)
                : new OmniSequence(preset, tokenizer, dev.stoker.text.JinjaChatRenderer.compile(options.chatTemplate()));
        this.tokenizerIdentity = tokenizer.identity();
        this.images = images;
        this.videos = videos;
    }

    /**
     * One sample's inputs.
     *
     * @param sample         input_ids, labels, attention_mask; {@code positionIds} the integer positions ((3, L) for
     *                       Qwen2.5-Omni, (1, L) for Qwen2-Audio, empty for Qwen3-Omni), pixel values and videos as for a
     *                       Qwen-VL sample
     * @param positionRows   rows of {@code positionIds} (3 or 1), 3 for the float positions
     * @param floatPositions Qwen3-Omni's (3, L) float32 positions, row-major; null for the others
     * @param inputFeatures  (clips, 128, frames) float32, row-major
     * @param featureMask    (clips, frames) as 0/1
     * @param validFrames    per clip, the frames its mask marks valid (the token rule's L)
     */
    public record Encoded(EncodedSample sample, int positionRows, float[] floatPositions, float[] inputFeatures, int clips, int frames,
                          int[] featureMask, int[] validFrames) {}

    /**
     * What this encoder did since it was made (issue 32, the feed's audio metrics; one encoder per thread, so plain
     * fields): clips decoded (files and videos' tracks) and their 16 kHz samples; the clips of the samples {@link #encode}
     * made (decoded or read from the cache; a clip a cut left out not counted) and their 16 kHz samples; the time spent
     * decoding (demux, decode, resample) and computing log-mel features (with the cache: reading and shaping an entry's), and
     * the bytes of {@code input_features} and {@code feature_attention_mask} made. {@link #shape}'s header reads are not
     * counted; its decodes (an MP3's length) are, in the decoded figures only.
     */
    private long clipsDecoded, samplesDecoded, clipsEncoded, samplesEncoded, decodeNanos, featureNanos, featureBytes;

    public long clipsDecoded() { return clipsDecoded; }

    public long samplesDecoded() { return samplesDecoded; }

    /** Clips in the samples {@link #encode} made, decoded or from the cache (the feed's {@code audio.clips}). */
    public long clipsEncoded() { return clipsEncoded; }

    /** Their 16 kHz samples (the feed's {@code audio.seconds} × 16,000). */
    public long samplesEncoded() { return samplesEncoded; }

    public long decodeNanos() { return decodeNanos; }

    public long featureNanos() { return featureNanos; }

    public long featureBytes() { return featureBytes; }

    /**
     * One decoded clip or header-known clip: its 16 kHz samples (pcm null when only measured, or when the cache gave its
     * length or features: {@code cached} its entry's {@link WhisperLogMel#head} frames); {@code source} what its cache keys
     * are made of, null when the cache is off.
     */
    private record Clip(String ref, long samples, float[] pcm, Source source, WhisperLogMel.Features cached) {
        Clip(String ref, long samples, float[] pcm) { this(ref, samples, pcm, null, null); }
    }

    /**
     * What a clip's cache keys are made of: the SHA-256 of its content (the clip's bytes, or for a video's track all the
     * video's bytes), its decode options (the cut, the bound, the resampler), whether it is a video's track; and how to
     * decode it when the cache gave its length but not its features (Qwen3-Omni's, keyed by the sample's longest clip).
     */
    private record Source(byte[] digest, AudioDecoder.Options opts, boolean track, java.util.function.Supplier<float[]> decode) {}

    /** Clips decoded by every encoder of this JVM (files, carried bytes and video tracks): what a warm cache spares. */
    private static final java.util.concurrent.atomic.LongAdder CLIPS_DECODED = new java.util.concurrent.atomic.LongAdder();

    /** Clips decoded (to 16 kHz PCM) by every OmniEncoder of this JVM since it started, header measurements not counted. */
    public static long clipsDecodedInJvm() { return CLIPS_DECODED.sum(); }

    /** Raised when decoding, resampling or the log-mel code change what features a clip gives: old entries no longer match. */
    public static final int AUDIO_RULES = 2;
    /**
     * The largest clip entry read back: its header and 128 float32 bins of {@link AudioDecoder}'s 600 s bound in frames,
     * with the head's three frames past the valid ones ({@link WhisperLogMel#headFrames}).
     */
    static final int MAX_CLIP_ENTRY_BYTES = 12 + 4 * AudioPreset.MEL_BINS * 60_004;

    /** The cache of preprocessed samples; null: none. */
    private dev.stoker.encode.cache.PreprocessedCache cache;

    /**
     * Reads and writes each sample's tokens ({@link #cachedText}) and each clip's log-mel features through {@code cache}
     * (null: none) from now on: files' clips and videos' tracks, under every family and both {@code --audio-pad} modes. An
     * entry holds a clip's {@link WhisperLogMel#head} frames (the valid ones and at most three more), from which both modes'
     * features are made bit for bit (so the two modes share it); under Qwen3-Omni, whose features depend on the sample's
     * longest clip, the key says which ({@link #form}), and a small entry keeps each clip's length so that the longest is
     * known without decoding.
     */
    public void useCache(dev.stoker.encode.cache.PreprocessedCache cache) { this.cache = cache; }

    /** Time spent in the cache (keys, entry reads and writes) since {@link #resetCacheNanos()}: this encoder's thread only. */
    private long cacheNanos;

    /** Time spent in the cache of preprocessed samples since {@link #resetCacheNanos()} (keys, reads, writes). */
    public long cacheNanos() { return cacheNanos; }

    public void resetCacheNanos() { cacheNanos = 0; }

    /**
     * The settings of a clip's keys: the family, the content's kind (a file, or a video's track), the cut
     * ({@code audio_start}, {@code audio_end}, or the family's kept part), the decode bound and resampler, the decoder path
     * (the FFmpeg libraries' versions, libswresample's), the mel bins and {@link #AUDIO_RULES}. Not the pad mode (the entry
     * serves both), never the path.
     */
    private String clipSettings(Source s) {
        var opts = s.opts();
        return "rules=" + AUDIO_RULES + " preset=" + preset + " bins=" + AudioPreset.MEL_BINS + " content=" + (s.track() ? "video-track" : "file")
                + " offset=" + opts.offsetSeconds() + " duration=" + opts.durationSeconds() + " max=" + opts.maxSeconds() + " resampler="
                + opts.resampler() + " decoder=" + audioDecoderPath();
    }

    /** The key of a clip's features in {@code form} ({@link #form}): {@link #clipSettings} and the content's SHA-256. */
    private dev.stoker.cache.CacheKey clipKey(Source s, String form) {
        return dev.stoker.cache.CacheKey.of("audio-log-mel", clipSettings(s) + " form=" + form, s.digest());
    }

    /** The key of a clip's length in 16 kHz samples (Qwen3-Omni: what its features' key needs of every clip of the sample). */
    private dev.stoker.cache.CacheKey lengthKey(Source s) {
        return dev.stoker.cache.CacheKey.of("audio-length", clipSettings(s), s.digest());
    }

    /**
     * What a clip's features depend on besides the clip: {@code chunk} where the family pads every clip to its chunk
     * (Qwen2-Audio, Qwen2.5-Omni); under Qwen3-Omni, which pads to the sample's longest clip, {@code padded} where that
     * length is at least three frames past the clip's valid ones (the head is then the same for every such length:
     * the frames whose window reaches the clip see zeros past it, and the floor counts a silent frame;
     * {@code WhisperLogMelHeadTest}), else that length itself ({@code to=N}: the clip is the longest, or within three
     * frames of it).
     */
    private String form(long samples, long longest) {
        if (preset != AudioPreset.QWEN3_OMNI) return "chunk";
        long kept = preset.keptSamples(samples), padded = preset.paddedSamples(samples, longest);
        return AudioPreset.totalFrames(padded) >= AudioPreset.maskFrames(kept, Long.MAX_VALUE / 2) + 3L ? "padded" : "to=" + padded;
    }

    /**
     * A sample's tokens, labels and integer positions from the cache, or built and stored: keyed by its messages (with
     * the {@code use_audio_in_video} default applied) and its media's sizes ({@link OmniTokens.Media}: each clip's mel
     * frames, each image's and video's grid), under the family, the vision family, the tokenizer's identity, the chat
     * template, the input contract, the model folder and {@link dev.stoker.encode.cache.PreprocessedCache#TEXT_RULES}.
     * Qwen3-Omni's entry holds its float32 positions in place of the integer ones.
     */
    private OmniSequence.Features cachedText(ChatSample sample, List<OmniTokens.Media> sizes, int maxLength) {
        String settings = "rules=" + dev.stoker.encode.cache.PreprocessedCache.TEXT_RULES + " audio=" + preset + " preset=" + options.preset()
                + " tokenizer=" + tokenizerIdentity + " template=" + (options.chatTemplate() == null ? "builtin" : options.chatTemplateSha256())
                + " contract=" + options.inputContract() + " model=" + options.model() + " cut=" + maxLength;
        long t0 = System.nanoTime();
        String content = sample.messages() + "|" + sizes;
        var key = dev.stoker.cache.CacheKey.of("omni-text", settings,
                dev.stoker.cache.CacheKey.sha256(content.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        var hit = textEntry(cache.store().read(key, dev.stoker.encode.cache.PreprocessedCache.MAX_TEXT_ENTRY_BYTES),
                preset.positionRule() == AudioPreset.PositionRule.QWEN3_OMNI);
        cacheNanos += System.nanoTime() - t0;
        if (hit != null) return hit;
        var text = sequence.build(sample, sizes, maxLength);
        long t1 = System.nanoTime();
        byte[] entry = textBytes(text);
        if (entry.length <= dev.stoker.encode.cache.PreprocessedCache.MAX_TEXT_ENTRY_BYTES) cache.store().write(key, entry, 0, entry.length);
        cacheNanos += System.nanoTime() - t1;
        return text;
    }

    /**
     * A token entry: L and the media items kept (int32), then input_ids and labels (int64), then the 3 × L positions: int64,
     * or under Qwen3-Omni float32 (its float positions); little-endian. The family is in the key, so the two layouts never meet.
     */
    static byte[] textBytes(OmniSequence.Features t) {
        int n = t.length();
        boolean floats = t.floatPositions() != null;
        var b = java.nio.ByteBuffer.allocate(Math.toIntExact(8 + (floats ? 28L : 40L) * n)).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        b.putInt(n).putInt(t.keptMedia());
        for (long[] a : new long[][] {t.inputIds(), t.labels()}) for (long v : a) b.putLong(v);
        if (floats) for (float v : t.floatPositions()) b.putFloat(v);
        else for (long v : t.positions()) b.putLong(v);
        return b.array();
    }

    /**
     * {@link #textBytes}' inverse ({@code floats}: Qwen3-Omni's layout), or null when {@code bytes} is not such an entry
     * (then the tokens are built).
     */
    static OmniSequence.Features textEntry(byte[] bytes, boolean floats) {
        if (bytes == null || bytes.length < 8) return null;
        var b = java.nio.ByteBuffer.wrap(bytes).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        int n = b.getInt(), kept = b.getInt();
        if (n < 1 || kept < 0 || bytes.length != 8 + (floats ? 28L : 40L) * n) return null;
        long[] ids = new long[n], labels = new long[n];
        for (long[] a : new long[][] {ids, labels}) for (int i = 0; i < a.length; i++) a[i] = b.getLong();
        if (floats) {
            float[] pos = new float[3 * n];
            for (int i = 0; i < pos.length; i++) pos[i] = b.getFloat();
            return new OmniSequence.Features(ids, labels, null, pos, kept);
        }
        long[] pos = new long[3 * n];
        for (int i = 0; i < pos.length; i++) pos[i] = b.getLong();
        return new OmniSequence.Features(ids, labels, pos, null, kept);
    }

    /** The FFmpeg libraries that decode and resample clips, with their versions (a clip's PCM can change with them). */
    private static String audioDecoderPath() {
        var f = dev.stoker.video.ffmpeg.Ffmpeg.get();
        return f.versions() + ", " + f.swresampleVersion();
    }

    /**
     * A clip entry: its 16 kHz samples, the head's frames and its valid frames (int32), then the head's features
     * ({@link WhisperLogMel#head}: 128 × head frames float32), little-endian.
     */
    static byte[] clipBytes(long samples, WhisperLogMel.Features head) {
        var b = java.nio.ByteBuffer.allocate(12 + 4 * head.values().length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        b.putInt(Math.toIntExact(samples)).putInt(head.frames()).putInt(head.validFrames());
        b.asFloatBuffer().put(head.values());
        return b.array();
    }

    /** A clip entry read back: the clip's 16 kHz samples and the head's features. */
    record ClipEntry(long samples, WhisperLogMel.Features head) {}

    /** {@link #clipBytes}' inverse, or null when {@code bytes} is not such an entry (then the clip is decoded). */
    static ClipEntry clip(byte[] bytes) {
        if (bytes == null || bytes.length < 12) return null;
        var b = java.nio.ByteBuffer.wrap(bytes).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        int samples = b.getInt(), frames = b.getInt(), valid = b.getInt();
        if (samples < 1 || frames < 1 || valid < 1 || valid > frames || frames > valid + 3
                || bytes.length != 12 + 4L * AudioPreset.MEL_BINS * frames) return null;
        float[] values = new float[AudioPreset.MEL_BINS * frames];
        b.asFloatBuffer().get(values);
        return new ClipEntry(samples, new WhisperLogMel.Features(values, frames, valid));
    }

    /** A length entry: a clip's 16 kHz samples (int64, little-endian). */
    static byte[] lengthBytes(long samples) {
        return java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(samples).array();
    }

    /** {@link #lengthBytes}' inverse, or -1 when {@code bytes} is not such an entry. */
    static long length(byte[] bytes) {
        if (bytes == null || bytes.length != 8) return -1;
        long n = java.nio.ByteBuffer.wrap(bytes).order(java.nio.ByteOrder.LITTLE_ENDIAN).getLong();
        return n >= 1 && n <= Integer.MAX_VALUE ? n : -1;
    }

    /** Encodes {@code sample}, reading clips and images through {@code source} and videos through {@code videoSource}. */
    public Encoded encode(ChatSample sample, ImageSource source, VideoPreprocessor.VideoSource videoSource) {
        var planned = plan(sample, source, videoSource, true);
        String id = planned.sample().id();
        var text = cache == null ? sequence.build(planned.sample(), planned.sizes(), truncateAt())
                : cachedText(planned.sample(), planned.sizes(), truncateAt());
        checkLength(id, text.length(), planned.clips().size(), planned.images().size(), planned.videos().size());
        // the sample's longest clip sets each clip's valid frames (Qwen3-Omni), and so its tokens: kept as the sizes had it
        long longest = longest(planned.clips());
        planned = planned.keep(text.keptMedia()); // under --truncation truncate: the items the cut left whole
        var clips = planned.clips();
        var plannedImages = planned.images();
        var plannedVideos = planned.videos();
        // features
        long f0 = System.nanoTime();
        var features = new ArrayList<WhisperLogMel.Features>(clips.size());
        int frames = 0;
        for (var c : clips) {
            var f = features(id, c, longest);
            features.add(f);
            frames = Math.max(frames, f.frames());
            clipsEncoded++;
            samplesEncoded += c.samples();
        }
        int n = clips.size();
        if ((long) n * AudioPreset.MEL_BINS * frames > Integer.MAX_VALUE - 8)
            throw new SampleException(id, Stage.TRANSFORM, "input_features of " + n + " clip(s) × " + frames + " frames are too large for one sample");
        float[] values = new float[n * AudioPreset.MEL_BINS * frames];
        int[] mask = new int[n * frames];
        int[] valid = new int[n];
        for (int k = 0; k < n; k++) {
            var f = features.get(k);
            for (int m = 0; m < AudioPreset.MEL_BINS; m++)
                System.arraycopy(f.values(), m * f.frames(), values, (k * AudioPreset.MEL_BINS + m) * frames, f.frames());
            java.util.Arrays.fill(mask, k * frames, k * frames + f.validFrames(), 1);
            valid[k] = f.validFrames();
        }
        featureNanos += System.nanoTime() - f0;
        featureBytes += 4L * values.length + 4L * mask.length;
        // pixels: float32 pixel_values rows, or in the compact wire format (a feed's --pixel-format uint8) each image's
        // resized u8 RGB pixels and each video's resized frames, as a Qwen-VL sample's (SampleEncoder.encodeCompact)
        boolean compact = options.pixelFormat() == dev.stoker.encode.EncodeOptions.PixelFormat.UINT8;
        int rowLength = options.vision().rowLength();
        long rows = 0, u8Bytes = 0, sourcePixels = 0;
        for (var p : plannedImages) {
            rows += p.plan().rows();
            u8Bytes += p.plan().resizedByteSize();
        }
        if (compact ? u8Bytes > Integer.MAX_VALUE - 8 : rows * rowLength > Integer.MAX_VALUE - 8)
            throw new SampleException(id, Stage.TRANSFORM, compact ? "pixels of " + u8Bytes + " bytes are too large for one sample"
                    : "pixel_values of " + rows + " rows is too large for one sample");
        float[] pixels = new float[compact ? 0 : (int) (rows * rowLength)];
        byte[] pixelsU8 = compact ? new byte[(int) u8Bytes] : null;
        long[] grid = new long[plannedImages.size() * 3];
        int offset = 0;
        for (int k = 0; k < plannedImages.size(); k++) {
            var img = plannedImages.get(k);
            try {
                if (compact) images.processResizedInto(img, pixelsU8, offset);
                else images.processInto(img, pixels, offset);
            } catch (SampleException e) {
                throw e.withSampleId(id + " (" + img.name() + ")");
            }
            offset += compact ? (int) img.plan().resizedByteSize() : img.plan().rows() * rowLength;
            sourcePixels += img.info().pixelCount();
            System.arraycopy(img.gridThw(), 0, grid, 3 * k, 3);
        }
        VideoTensors videoTensors = plannedVideos.isEmpty() ? null : videoTensors(id, plannedVideos, videoSource, compact);
        long[] ids = text.inputIds();
        long[] attention = new long[ids.length];
        java.util.Arrays.fill(attention, 1);
        int positionRows = 3;
        long[] positions = text.positions();
        if (preset.positionRule() == AudioPreset.PositionRule.TEXT_1D) { // Qwen2-Audio: a Qwen2 LM, 1-D positions
            positionRows = 1;
            positions = java.util.Arrays.copyOf(positions, ids.length);
        }
        if (positions == null) positions = new long[0];
        var encoded = new EncodedSample(id, ids, text.labels(), attention, positions, pixels, rowLength, grid, sourcePixels, pixelsU8, videoTensors);
        return new Encoded(encoded, positionRows, text.floatPositions(), values, n, frames, mask, valid);
    }

    /**
     * The sample's size before decoding: its {@code input_ids} length (as {@link #encode} builds them, clips counted from
     * their headers' durations), and its images' and videos' patches. Refuses what {@link #encode} would refuse before
     * decoding.
     */
    public SampleShape shape(ChatSample sample, Map<String, byte[]> bytesByReference, VideoPreprocessor.VideoSource videoSource) {
        ImageSource source = (sid, ref) -> {
            byte[] b = bytesByReference.get(ref);
            if (b == null) throw new SampleException(sid, Stage.FETCH, "'" + ref + "' was not fetched");
            return b;
        };
        var planned = plan(sample, source, videoSource, false);
        String id = sample.id();
        var text = sequence.build(planned.sample(), planned.sizes(), truncateAt());
        int length = text.length();
        checkLength(id, length, planned.clips().size(), planned.images().size(), planned.videos().size());
        long longest = longest(planned.clips()); // as encode: the whole sample's longest clip, before a cut
        planned = planned.keep(text.keptMedia());
        var clips = planned.clips();
        var plannedImages = planned.images();
        var plannedVideos = planned.videos();
        int[] patches = new int[plannedImages.size()];
        for (int k = 0; k < patches.length; k++) patches[k] = plannedImages.get(k).plan().rows();
        int[] videoPatches = new int[plannedVideos.size()], videoGroups = new int[plannedVideos.size()];
        for (int k = 0; k < videoPatches.length; k++) {
            videoPatches[k] = Math.toIntExact(plannedVideos.get(k).rows());
            videoGroups[k] = plannedVideos.get(k).plan().gridT();
        }
        int[] clipFrames = new int[clips.size()];
        for (int k = 0; k < clipFrames.length; k++) clipFrames[k] = frames(clips.get(k).samples(), longest);
        return SampleShape.of(length, patches, videoPatches, videoGroups).withClips(clipFrames);
    }

    /**
     * The frames of the row of {@code input_features} a clip of {@code samples} samples gets beside a longest one of
     * {@code longest} ({@link #features}'s, without its PCM): its valid frames, or under {@code --audio-pad hf} every frame
     * the processor computes for it.
     */
    private int frames(long samples, long longest) {
        long kept = preset.keptSamples(samples);
        long padded = preset.paddedSamples(samples, longest);
        return pad == AudioEncoding.Pad.VALID ? AudioPreset.maskFrames(kept, padded) : AudioPreset.totalFrames(padded);
    }

    /** A sample's media before its features: its clips (decoded or measured), images and videos planned, and their sizes. */
    private record Planned(ChatSample sample, List<Clip> clips, List<ImagePreprocessor.Planned> images,
                           List<VideoPreprocessor.Planned> videos, List<OmniTokens.Media> sizes) {
        /** The first {@code items} of the sample's media with their clips, images and videos (a video's track is its clip). */
        Planned keep(int items) {
            var media = sample.media();
            if (items == media.size()) return this;
            int c = 0, i = 0, v = 0;
            for (var part : media.subList(0, items)) {
                switch (part) {
                    case Message.Audio _ -> c++;
                    case Message.Image _ -> i++;
                    case Message.Video video -> {
                        v++;
                        if (video.useAudioInVideo()) c++;
                    }
                    case Message.Text _ -> { }
                }
            }
            return new Planned(sample, clips.subList(0, c), images.subList(0, i), videos.subList(0, v), sizes.subList(0, items));
        }
    }

    /** The length a sample is cut to: {@code --max-seq-len} under {@code --truncation truncate}, else none (over it is filtered). */
    private int truncateAt() {
        int max = options.maxSequenceLength();
        return max > 0 && options.truncation() == dev.stoker.text.TruncationPolicy.TRUNCATE ? max : Integer.MAX_VALUE;
    }

    /**
     * Checks {@code sample}'s media, applies the {@code use_audio_in_video} default, plans its images and videos and reads
     * its clips in place order: decoded ({@code decode}) for {@link #encode}, else measured from their headers for
     * {@link #shape}.
     */
    private Planned plan(ChatSample sample, ImageSource source, VideoPreprocessor.VideoSource videoSource, boolean decode) {
        String id = sample.id();
        checkMedia(sample);
        sample = withAudioInVideoDefault(sample);
        var media = sample.media();
        var clips = new ArrayList<Clip>();
        var plannedImages = new ArrayList<ImagePreprocessor.Planned>();
        var plannedVideos = new ArrayList<VideoPreprocessor.Planned>();
        for (var part : media) {
            switch (part) {
                case Message.Audio a -> clips.add(decode ? decode(id, a, source) : measure(id, a, source));
                case Message.Image i -> plannedImages.add(planImage(id, i.ref(), source));
                case Message.Video v -> {
                    plannedVideos.add(videos.plan(id, v, videoSource, source));
                    if (v.useAudioInVideo()) clips.add(decode ? decodeTrack(id, v, videoSource) : measureTrack(id, v, videoSource));
                }
                case Message.Text _ -> { }
            }
        }
        return new Planned(sample, clips, plannedImages, plannedVideos, sizes(id, media, clips, plannedImages, plannedVideos));
    }

    /** The references a sample's clips are fetched by (its audio items; a video's track is read with the video). */
    public static List<String> audioReferences(ChatSample sample) {
        var out = new java.util.LinkedHashSet<String>();
        for (var a : sample.audios()) out.add(a.ref());
        return List.copyOf(out);
    }

    /**
     * {@code sample} with {@code use_audio_in_video: true} on each video whose item (and record) did not say, when
     * {@code --use-audio-in-video} is given; a frame-list video, which has no track, is then the sample's error.
     */
    private ChatSample withAudioInVideoDefault(ChatSample sample) {
        if (!options.audio().useAudioInVideo() || sample.videos().isEmpty()) return sample;
        var messages = new ArrayList<Message>(sample.messages().size());
        for (var m : sample.messages()) {
            var parts = new ArrayList<Message.Part>(m.parts().size());
            for (var p : m.parts()) {
                if (p instanceof Message.Video v && !v.options().containsKey(Message.USE_AUDIO_IN_VIDEO)) {
                    if (v.isFrameList())
                        throw new SampleException(sample.id(), Stage.MANIFEST, "a video of " + v.frames().size() + " frame images has no audio "
                                + "track, but --use-audio-in-video asks for it (give the item use_audio_in_video false)");
                    var o = new java.util.LinkedHashMap<String, Object>(v.options());
                    o.put(Message.USE_AUDIO_IN_VIDEO, true);
                    p = new Message.Video(v.ref(), v.frames(), o);
                }
                parts.add(p);
            }
            messages.add(new Message(m.role(), parts));
        }
        return new ChatSample(sample.id(), messages, sample.imagePaths());
    }

    private void checkMedia(ChatSample sample) {
        boolean vision = !sample.imagePaths().isEmpty() || !sample.videos().isEmpty();
        if (vision && !preset.hasVision())
            throw new SampleException(sample.id(), Stage.MANIFEST, "has " + sample.imagePaths().size() + " image(s) and " + sample.videos().size()
                    + " video(s), but " + preset + " takes audio and text only");
        if (options.maxImages() > 0 && sample.imagePaths().size() > options.maxImages())
            throw SampleException.filtered(sample.id(), Stage.MANIFEST, "over --max-images", "has " + sample.imagePaths().size()
                    + " images, more than --max-images " + options.maxImages());
        if (!sample.videos().isEmpty() && videos == null)
            throw new SampleException(sample.id(), Stage.MANIFEST, "has " + sample.videos().size() + " video(s) but this job takes no video");
    }

    private void checkLength(String id, int length, int clips, int images, int videos) {
        int max = options.maxSequenceLength();
        if (max > 0 && length > max)
            throw SampleException.filtered(id, Stage.TOKENIZE, "over --max-seq-len", "sequence has " + length + " tokens, over the limit of "
                    + max + " (" + clips + " audio clip(s), " + images + " image(s), " + videos + " video(s))");
    }

    private ImagePreprocessor.Planned planImage(String id, String ref, ImageSource source) {
        try {
            return images.plan(source.read(id, ref), ref);
        } catch (SampleException e) {
            throw e.withSampleId(id + " (" + ref + ")");
        }
    }

    /** The token-side size of each media item, in order; clips' frames from their sample counts (the family's rule). */
    private List<OmniTokens.Media> sizes(String id, List<Message.Part> media, List<Clip> clips, List<ImagePreprocessor.Planned> images,
                                         List<VideoPreprocessor.Planned> videos) {
        long longest = longest(clips);
        var sizes = new ArrayList<OmniTokens.Media>(media.size());
        int c = 0, i = 0, v = 0;
        try {
            for (var part : media) {
                switch (part) {
                    case Message.Audio _ -> sizes.add(new OmniTokens.AudioClip(OmniTokens.melFrames(preset, clips.get(c++).samples(), longest)));
                    case Message.Image _ -> {
                        long[] g = images.get(i++).gridThw();
                        sizes.add(new OmniTokens.ImageGrid(g[0], g[1], g[2]));
                    }
                    case Message.Video video -> {
                        var p = videos.get(v++).plan();
                        long audio = video.useAudioInVideo() ? OmniTokens.melFrames(preset, clips.get(c++).samples(), longest) : 0;
                        // the processor's video_second_per_grid: temporal_patch_size / fps (the plan's float32 value)
                        sizes.add(new OmniTokens.VideoGrid(p.gridT(), p.gridH(), p.gridW(), p.secondPerGridT(), audio));
                    }
                    case Message.Text _ -> { }
                }
            }
        } catch (IllegalArgumentException e) {
            throw new SampleException(id, Stage.TEXT, preset + ": " + e.getMessage(), e);
        }
        return sizes;
    }

    private static long longest(List<Clip> clips) {
        long longest = 0;
        for (var c : clips) longest = Math.max(longest, c.samples());
        return longest;
    }

    /**
     * A clip's features beside a longest clip of {@code longest} samples: computed, or with the cache made of its entry's
     * head ({@link WhisperLogMel#slice} to the valid frames, or {@link WhisperLogMel#padTo} every frame under
     * {@code --audio-pad hf}), the entry read here (Qwen3-Omni: only now is its key's form known) or already by
     * {@link #decode}, and written on a miss.
     */
    private WhisperLogMel.Features features(String id, Clip c, long longest) {
        long kept = preset.keptSamples(c.samples());
        long padded = preset.paddedSamples(c.samples(), longest);
        int total = AudioPreset.totalFrames(padded);
        if (c.source() == null) {
            if (pad == AudioEncoding.Pad.VALID) return logMel.valid(c.pcm(), preset, longest);
            return logMel.compute(c.pcm(), (int) kept, padded, total);
        }
        var head = c.cached();
        // a clip decoded, not Qwen3-Omni: its entry was read and missed (cachedClip); a Qwen3-Omni clip's is read here
        if (head == null && preset != AudioPreset.QWEN3_OMNI && c.pcm() != null) {
            head = logMel.head(c.pcm(), (int) kept, padded);
            write(clipKey(c.source(), "chunk"), clipBytes(c.samples(), head));
        } else if (head == null) {
            long t0 = System.nanoTime();
            var key = clipKey(c.source(), form(c.samples(), longest));
            var hit = clip(cache.store().read(key, MAX_CLIP_ENTRY_BYTES));
            cacheNanos += System.nanoTime() - t0;
            if (hit != null && hit.samples() == c.samples()) head = hit.head();
            else {
                float[] pcm = c.pcm() != null ? c.pcm() : c.source().decode().get();
                if (pcm.length != c.samples())
                    throw new SampleException(id + " (" + c.ref() + ")", Stage.DECODE, "audio " + c.ref() + " decoded to " + pcm.length
                            + " samples, but the cache's entry of its length says " + c.samples());
                head = logMel.head(pcm, (int) kept, padded);
                write(key, clipBytes(c.samples(), head));
            }
        }
        if (pad == AudioEncoding.Pad.VALID) return WhisperLogMel.slice(head, AudioPreset.maskFrames(kept, padded));
        return WhisperLogMel.padTo(head, total);
    }

    private AudioDecoder.Options decodeOptions(String id, Message.Audio a) {
        double start = 0, end = -1;
        for (var e : a.options().entrySet()) {
            double value = e.getValue() instanceof Number num ? num.doubleValue() : Double.NaN;
            switch (e.getKey()) {
                case AUDIO_START -> start = value;
                case AUDIO_END -> end = value;
                default -> throw new SampleException(id, Stage.MANIFEST, "audio " + a.ref() + ": per-item key '" + e.getKey()
                        + "' is not read by Stoker (it reads " + AUDIO_START + " and " + AUDIO_END + ", in seconds)");
            }
            if (!(value >= 0) || Double.isInfinite(value))
                throw new SampleException(id, Stage.MANIFEST, "audio " + a.ref() + ": '" + e.getKey() + "' must be a number of seconds >= 0, got "
                        + e.getValue());
        }
        if (end >= 0 && end <= start)
            throw new SampleException(id, Stage.MANIFEST, "audio " + a.ref() + ": " + AUDIO_END + " " + end + " is not after " + AUDIO_START + " " + start);
        return keptPart(AudioDecoder.Options.whole().window(start, end < 0 ? -1 : end - start));
    }

    /**
     * Seconds decoded past what the processor keeps of a clip (Qwen2-Audio 30 s, Qwen2.5-Omni 300 s): the resampler's
     * output up to the kept length is then the whole clip's bit for bit (its filter reaches milliseconds ahead;
     * {@code AudioDecoderTest.stoppingPastTheKeptPartLeavesItAsTheWholeDecodesIt}).
     */
    static final double KEEP_MARGIN_SECONDS = 1;

    /**
     * {@code o} stopped {@link #KEEP_MARGIN_SECONDS} past the family's chunk, for the families whose processor truncates
     * every clip to it: a clip of any length is then decoded only as far as it is used, and never refused for its length
     * ({@link AudioDecoder#DEFAULT_MAX_SECONDS} bounds Qwen3-Omni's clips, which its processor keeps whole).
     */
    private AudioDecoder.Options keptPart(AudioDecoder.Options o) {
        if (preset.hfPadSeconds() == 0) return o;
        double keep = preset.hfPadSeconds() + KEEP_MARGIN_SECONDS;
        return o.window(o.offsetSeconds(), o.durationSeconds() < 0 ? keep : Math.min(o.durationSeconds(), keep));
    }

    private Clip decode(String id, Message.Audio a, ImageSource source) {
        var opts = decodeOptions(id, a);
        byte[] bytes = source.read(id, a.ref());
        java.util.function.Supplier<float[]> decode = () -> decodePcm(id, a, bytes, opts);
        if (cache == null) return decoded(a.ref(), decode.get(), null);
        long t0 = System.nanoTime();
        var src = new Source(dev.stoker.cache.CacheKey.sha256(bytes), opts, false, decode);
        cacheNanos += System.nanoTime() - t0;
        return cachedClip(a.ref(), src);
    }

    /** {@code pcm} decoded as a clip, with its cache keys' {@code source} (null: the cache is off). */
    private static Clip decoded(String ref, float[] pcm, Source source) { return new Clip(ref, pcm.length, pcm, source, null); }

    /**
     * A clip through the cache: where its features' key needs no other clip (not Qwen3-Omni), its features entry (the
     * clip's length with them); under Qwen3-Omni its length entry (its features are read once the sample's longest clip is
     * known, {@link #features}); decoded on a miss, and its length written.
     */
    private Clip cachedClip(String ref, Source src) {
        long t0 = System.nanoTime();
        if (preset != AudioPreset.QWEN3_OMNI) {
            var hit = clip(cache.store().read(clipKey(src, "chunk"), MAX_CLIP_ENTRY_BYTES));
            cacheNanos += System.nanoTime() - t0;
            if (hit != null) return new Clip(ref, hit.samples(), null, src, hit.head());
            return decoded(ref, src.decode().get(), src);
        }
        var lengthKey = lengthKey(src);
        long n = length(cache.store().read(lengthKey, 8));
        cacheNanos += System.nanoTime() - t0;
        if (n > 0) return new Clip(ref, n, null, src, null);
        var clip = decoded(ref, src.decode().get(), src);
        write(lengthKey, lengthBytes(clip.samples()));
        return clip;
    }

    /** Writes an entry to this node's cache, its time counted as the cache's. */
    private void write(dev.stoker.cache.CacheKey key, byte[] entry) {
        long t0 = System.nanoTime();
        cache.store().write(key, entry, 0, entry.length);
        cacheNanos += System.nanoTime() - t0;
    }

    private float[] decodePcm(String id, Message.Audio a, byte[] bytes, AudioDecoder.Options opts) {
        try {
            long t0 = System.nanoTime();
            var clip = AudioDecoder.decode(a.ref(), bytes, opts, t0 + DECODE_TIMEOUT_NANOS);
            counted(t0, clip.samples().length);
            CLIPS_DECODED.increment();
            return clip.samples();
        } catch (SampleException e) {
            throw e.withSampleId(id + " (" + a.ref() + ")");
        }
    }

    /**
     * A video's audio track. With the cache, keyed by the SHA-256 of all the video's bytes (read once more for it, as the
     * video's own entry reads them) and the family's kept part.
     */
    private Clip decodeTrack(String id, Message.Video v, VideoPreprocessor.VideoSource videoSource) {
        var opts = keptPart(AudioDecoder.Options.whole());
        java.util.function.Supplier<float[]> decode = () -> decodeTrackPcm(id, v, videoSource, opts);
        if (cache == null) return decoded(v.ref(), decode.get(), null);
        long t0 = System.nanoTime();
        byte[] digest = videoDigest(id, v, videoSource);
        cacheNanos += System.nanoTime() - t0;
        return cachedClip(v.ref(), new Source(digest, opts, true, decode));
    }

    private float[] decodeTrackPcm(String id, Message.Video v, VideoPreprocessor.VideoSource videoSource, AudioDecoder.Options opts) {
        try (SeekableByteSource s = videoSource.open(id, v.ref())) {
            long t0 = System.nanoTime();
            var clip = AudioDecoder.decode(s, opts, t0 + DECODE_TIMEOUT_NANOS);
            counted(t0, clip.samples().length);
            CLIPS_DECODED.increment();
            return clip.samples();
        } catch (SampleException e) {
            throw noTrack(id, v, e);
        } catch (java.io.IOException e) {
            throw new SampleException(id, Stage.FETCH, "video " + v.ref() + ": " + e.getMessage(), e);
        }
    }

    /** The SHA-256 of all of a video's bytes (what its frames' entry is keyed by, docs/cache.md), read in 1 MiB pieces. */
    private static byte[] videoDigest(String id, Message.Video v, VideoPreprocessor.VideoSource videoSource) {
        java.security.MessageDigest sha;
        try {
            sha = java.security.MessageDigest.getInstance("SHA-256");
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        try (SeekableByteSource s = videoSource.open(id, v.ref()); var arena = java.lang.foreign.Arena.ofConfined()) {
            long size = s.sizeBytes();
            var buf = arena.allocate(1 << 20);
            for (long at = 0; at < size; ) {
                int n = s.read(at, buf.asSlice(0, Math.min(buf.byteSize(), size - at)));
                if (n <= 0) throw new java.io.IOException("the video ended at byte " + at + " of " + size);
                sha.update(buf.asSlice(0, n).asByteBuffer());
                at += n;
            }
        } catch (java.io.IOException e) {
            throw new SampleException(id, Stage.FETCH, "video " + v.ref() + ": " + e.getMessage(), e);
        }
        return sha.digest();
    }

    /** Counts one clip of {@code samples} decoded since {@code t0}. */
    private void counted(long t0, long samples) {
        decodeNanos += System.nanoTime() - t0;
        clipsDecoded++;
        samplesDecoded += samples;
    }

    /** A video whose audio was asked for but that has none: the sample's error, saying so (qwen-omni-utils asserts). */
    private static SampleException noTrack(String id, Message.Video v, SampleException e) {
        return new SampleException(id + " (" + v.ref() + ")", Stage.DECODE, "video " + v.ref() + " is used with use_audio_in_video but "
                + e.getMessage().replaceFirst("^audio [^:]*: ", "") + " (give the sample use_audio_in_video false, or a video with sound)", e);
    }

    /** A clip's 16 kHz length from its header's duration; decoded when the header has none. */
    private Clip measure(String id, Message.Audio a, ImageSource source) {
        var opts = decodeOptions(id, a);
        byte[] bytes = source.read(id, a.ref());
        try {
            double seconds = headerSeconds(SeekableByteSource.of(a.ref(), bytes));
            if (Double.isNaN(seconds)) return decode(id, a, source);
            double end = opts.durationSeconds() < 0 ? seconds : Math.min(seconds, opts.offsetSeconds() + opts.durationSeconds());
            long samples = AudioPreset.samplesForSeconds(Math.max(0, end - opts.offsetSeconds()));
            if (samples < 1)
                throw new SampleException(id, Stage.DECODE, "audio " + a.ref() + ": no audio from " + opts.offsetSeconds() + " s on (it lasts "
                        + seconds + " s)");
            checkBound(a.ref(), seconds, samples, opts);
            return new Clip(a.ref(), samples, null);
        } catch (SampleException e) {
            throw e.withSampleId(id + " (" + a.ref() + ")");
        }
    }

    private Clip measureTrack(String id, Message.Video v, VideoPreprocessor.VideoSource videoSource) {
        double seconds;
        try (SeekableByteSource s = videoSource.open(id, v.ref())) {
            seconds = headerSeconds(s);
        } catch (SampleException e) {
            throw noTrack(id, v, e);
        } catch (java.io.IOException e) {
            throw new SampleException(id, Stage.FETCH, "video " + v.ref() + ": " + e.getMessage(), e);
        }
        if (Double.isNaN(seconds)) return decodeTrack(id, v, videoSource);
        long samples = Math.max(1, AudioPreset.samplesForSeconds(seconds));
        try {
            checkBound(v.ref(), seconds, samples, keptPart(AudioDecoder.Options.whole()));
        } catch (SampleException e) {
            throw e.withSampleId(id + " (" + v.ref() + ")");
        }
        return new Clip(v.ref(), samples, null);
    }

    /**
     * A clip measured from its header is refused where decoding it would be: over the decoder's bound, unless the family
     * keeps only its chunk ({@link #keptPart}: decoding stops there, whatever the clip's length).
     */
    private void checkBound(String ref, double seconds, long samples, AudioDecoder.Options opts) {
        if (preset.hfPadSeconds() == 0 && samples > opts.maxSamples())
            throw new SampleException(ref, Stage.DECODE, "audio " + ref + ": " + seconds + " s, over the limit of " + opts.maxSeconds() + " s");
    }

    /**
     * The audio stream's duration in seconds from the container header, or NaN when the header has none or is known not
     * to be the decoded length: MPEG audio (MP3's Xing/LAME frame count includes the encoder delay and padding, which the
     * decoder drops; measured: a 3 s 48 kHz clip's header says 3.024 s, 76 tokens where the decoded clip gives 75; 7.3 s
     * at 44.1 kHz says 7.34 s, 184 tokens for 182), which is then decoded.
     */
    static double headerSeconds(SeekableByteSource source) {
        try (Demuxer d = Demuxer.openAudio(source, System.nanoTime() + DECODE_TIMEOUT_NANOS)) {
            var info = StreamInfo.of(d);
            if (info.codec() != null && info.codec().matches("mp[123].*")) return Double.NaN;
            if (info.headerDuration() <= 0 || info.headerDuration() == Long.MIN_VALUE || !info.timeBase().known()) return Double.NaN;
            return info.headerDuration() * info.timeBase().toDouble();
        }
    }

    /**
     * The kept videos' tensors: their pixel_values_videos rows, or in the compact format ({@code compact}) their resized
     * frames and frame counts ({@link VideoTensors#pixelsU8()}), as {@code SampleEncoder.encode} gives a Qwen-VL sample's.
     */
    private VideoTensors videoTensors(String id, List<VideoPreprocessor.Planned> kept, VideoPreprocessor.VideoSource videoSource,
                                      boolean compact) {
        int rowLength = videos.rowLength();
        long rows = 0, bytes = 0;
        for (var p : kept) {
            rows += p.rows();
            bytes += p.clipBytes();
        }
        if (compact ? bytes > Integer.MAX_VALUE - 8 : rows * rowLength > Integer.MAX_VALUE - 8)
            throw new SampleException(id, Stage.TRANSFORM, compact ? "video frames of " + bytes + " bytes are too large for one sample"
                    : "pixel_values_videos of " + rows + " rows is too large for one sample");
        float[] pixels = new float[compact ? 0 : (int) (rows * rowLength)];
        byte[] frames = compact ? new byte[(int) bytes] : null;
        int offset = 0;
        long[] grid = new long[kept.size() * 3];
        float[] seconds = new float[kept.size()];
        long[] frameCounts = new long[kept.size()];
        for (int k = 0; k < kept.size(); k++) {
            var p = kept.get(k);
            if (compact) {
                videos.writeResized(id, p, videoSource, frames, offset);
                offset += (int) p.clipBytes();
            } else {
                videos.writePixels(id, p, videoSource, pixels, offset);
                offset += (int) (p.rows() * rowLength);
            }
            System.arraycopy(p.plan().gridThw(), 0, grid, 3 * k, 3);
            seconds[k] = p.plan().secondPerGridT();
            frameCounts[k] = p.plan().frameCount();
        }
        long[] indices = kept.stream().flatMapToLong(p -> java.util.Arrays.stream(p.plan().frameIndices())).toArray();
        return compact ? new VideoTensors(pixels, rowLength, grid, seconds, indices, frames, frameCounts)
                : new VideoTensors(pixels, rowLength, grid, seconds, indices);
    }
}
