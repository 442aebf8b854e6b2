package dev.stoker.encode;

import dev.stoker.core.SampleException;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.encode.video.VideoPreprocessor;
import dev.stoker.encode.video.VideoTensors;
import dev.stoker.source.SampleRecords;
import dev.stoker.text.ChatRenderer;
import dev.stoker.text.ChatSample;
import dev.stoker.text.ChatTemplate;
import dev.stoker.text.QwenTokenizer;
import dev.stoker.text.SampleParser;
import dev.stoker.text.TextFeatures;
import dev.stoker.text.TokenSequenceBuilder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Turns one SFT record into its model inputs: parse → per image read, probe and plan the resize →
 * tokens (an over-long sample is refused here, before any pixel is decoded) → decode, resize,
 * normalize and patchify the images whose tokens survived.
 *
 * <p>Threading: one instance per thread; it holds that thread's decoder and resize buffers. The
 * tokenizer may be shared.
 */
public final class SampleEncoder {
    /** Where image bytes come from (local files now, object stores later). */
    @FunctionalInterface
    public interface ImageSource {
        byte[] read(String sampleId, String reference);

        /** Reads through {@code source}, waiting for each fetch (for one-off commands and benchmarks of the CPU half). */
        static ImageSource blocking(dev.stoker.source.ObjectSource source) {
            return (sampleId, reference) -> {
                try {
                    return source.fetch(sampleId, reference).join();
                } catch (java.util.concurrent.CompletionException e) {
                    if (e.getCause() instanceof SampleException se) throw se;
                    throw new SampleException(sampleId, SampleException.Stage.FETCH, String.valueOf(e.getCause()), e.getCause());
                }
            };
        }
    }

    /**
     * Supplies the array a sample's pixel_values are written into, at least {@code floats} long.
     * {@link #FRESH} allocates an exact array per sample; a caller that consumes the rows before
     * encoding the next sample may hand out one reused array and spare the allocation.
     */
    @FunctionalInterface
    public interface PixelBuffers {
        PixelBuffers FRESH = float[]::new;

        float[] get(int floats);
    }

    private final EncodeOptions options;
    private final SampleParser parser;
    private final TokenSequenceBuilder tokens;
    private final String tokenizerIdentity;
    /** The cache of preprocessed samples; null: none. */
    private dev.stoker.encode.cache.PreprocessedCache cache;
    private final ImagePreprocessor images;
    /** Null for an encoder without video: its parser refuses video records. */
    private final VideoPreprocessor videos;

    /**
     * An encoder that renders chats with the options' chat template: the built-in template of the preset's family, or
     * the model's own ({@link EncodeOptions#chatTemplate()}, compiled here).
     *
     * @throws dev.stoker.text.ChatTemplateException when the model's template does not compile
     */
    public SampleEncoder(EncodeOptions options, QwenTokenizer tokenizer) {
        this(options, tokenizer, dev.stoker.video.decode.FrameDecoder.IN_PROCESS);
    }

    /**
     * An encoder of {@code options}' samples, their videos ({@link EncodeOptions#video()}, when set) decoded through
     * {@code decoder} (a feed's worker processes, or in process).
     */
    public SampleEncoder(EncodeOptions options, QwenTokenizer tokenizer, dev.stoker.video.decode.FrameDecoder decoder) {
        this(options, tokenizer, options.chatTemplate() == null ? new ChatTemplate(options.preset().chatFamily())
                : dev.stoker.text.JinjaChatRenderer.compile(options.chatTemplate()), options.video(), decoder);
    }

    /**
     * An encoder that renders chats with {@code template}, for example the model's own ({@link dev.stoker.text.JinjaChatRenderer},
     * after {@link dev.stoker.text.TemplateCheck} found that it differs from the built-in one); labels follow the official rule.
     */
    public SampleEncoder(EncodeOptions options, QwenTokenizer tokenizer, ChatRenderer template) {
        this(options, tokenizer, template, options.video(), dev.stoker.video.decode.FrameDecoder.IN_PROCESS);
    }

    private SampleEncoder(EncodeOptions options, QwenTokenizer tokenizer, ChatRenderer template, VideoEncoding video,
                          dev.stoker.video.decode.FrameDecoder decoder) {
        this.options = options;
        this.tokenizerIdentity = tokenizer.identity();
        int maxLength = options.maxSequenceLength() == 0 ? Integer.MAX_VALUE : options.maxSequenceLength(); // 0: no limit
        var builder = TokenSequenceBuilder.forPreset(tokenizer, options.preset(), template, maxLength, options.truncation());
        this.images = new ImagePreprocessor(options);
        this.parser = options.sampleParser(); // without video, why this job takes none (if it says); audio under an audio family
        if (video == null) {
            this.tokens = builder;
            this.videos = null;
        } else {
            this.tokens = builder.withVideo(options.preset(), video.contract());
            // an audio family's videos follow its video rules (the Omni families their own: ProcessorPreset.videoFamily)
            var videoFamily = options.audio() == null ? options.preset() : switch (options.audio().preset()) {
                case QWEN3_OMNI -> dev.stoker.core.ProcessorPreset.QWEN3_OMNI;
                case QWEN2_5_OMNI -> dev.stoker.core.ProcessorPreset.QWEN2_5_OMNI;
                default -> options.preset();
            };
            this.videos = new VideoPreprocessor(videoFamily, options.vision(), video, options.decodeMemoryBytes(1), decoder);
            // frame lists: their images decoded on this encoder's thread as its images are, within the same limits
            this.videos.decodeFramesWith(dev.stoker.image.decode.ImageDecoders.forCurrentThread(),
                    new dev.stoker.image.decode.DecodeOptions(options.exif(), options.maxSourcePixels(), 1, images.decodeMemoryBytes()));
        }
        this.omni = options.audio() == null ? null : new dev.stoker.encode.audio.OmniEncoder(options, tokenizer, images, videos);
    }

    /** The audio family's half (issue 32), or null under a Qwen-VL processor. */
    private final dev.stoker.encode.audio.OmniEncoder omni;

    /**
     * Encodes a sample of an audio family ({@link EncodeOptions#audio()} set): its clips' log-mel features beside the
     * tensors of {@link #encode}, its positions those of the family ({@link dev.stoker.encode.audio.OmniEncoder}). Needs an
     * encoder made with audio. {@code stoker encode} calls it; the feed calls {@link #encodeAudioForBatch} (through {@link #encode}).
     */
    public dev.stoker.encode.audio.OmniEncoder.Encoded encodeAudioSample(ChatSample sample, ImageSource source,
                                                                         VideoPreprocessor.VideoSource videoSource) {
        if (omni == null) throw new IllegalStateException("this encoder was made without an audio family");
        return omni.encode(sample, source, videoSource == null ? NO_VIDEOS : videoSource);
    }

    /**
     * An audio family's sample as a padded batch carries it ({@link dev.stoker.encode.batch.BatchSchema}): the tensors of
     * {@link #encodeAudioSample}, its clips as {@link EncodedSample#audio()}, Qwen3-Omni's float32 positions as
     * {@link EncodedSample#floatPositionIds()} (Qwen2-Audio's one row of L in {@link EncodedSample#positionIds()}). In the
     * compact format (UINT8) its images and videos are their resized u8 pixels as a Qwen-VL sample's; the audio tensors are
     * float32 and int32 in both formats.
     */
    public EncodedSample encodeAudioForBatch(ChatSample sample, ImageSource source, VideoPreprocessor.VideoSource videoSource) {
        var e = encodeAudioSample(sample, source, videoSource);
        var s = e.sample().withAudio(dev.stoker.encode.audio.AudioTensors.of(e));
        return e.floatPositions() == null ? s : s.withFloatPositions(e.floatPositions());
    }

    /** Whether this encoder encodes an audio family's samples ({@link #encodeAudioSample}). */
    public boolean audio() { return omni != null; }

    /** Bytes of the made-up clip {@link #warmUpVideoPixels} reads, and of the rows it writes; 0 and 0 for an encoder without video. */
    public long[] videoWarmUpBytes() {
        return videos == null ? new long[] {0, 0} : new long[] {videos.warmUpFrameBytes(), videos.warmUpBytes()};
    }

    /**
     * Writes a made-up clip's pixel_values_videos rows, its frames read from {@code frames}, into {@code dst} from
     * {@code offsetBytes} through this encoder's video pixel writer (a JIT warm-up: {@link VideoPreprocessor#warmUpPixels});
     * nothing for an encoder without video.
     */
    public void warmUpVideoPixels(java.lang.foreign.MemorySegment frames, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        if (videos != null) videos.warmUpPixels(frames, dst, offsetBytes);
    }

    /** The video half's counters (videos, frames decoded and kept, decode time); null for an encoder without video. */
    public VideoPreprocessor videoStats() { return videos; }

    /** Parses one JSONL line as this encoder reads records (video records only when it was made with video). */
    public ChatSample parse(byte[] line, String fallbackId) {
        return parser.parseLine(line, fallbackId);
    }

    public EncodeOptions options() { return options; }

    /** Per-stage time of the calls since {@link #resetTimes()}: decode, transform (resize + patchify), tokenize. */
    public long decodeNanos() { return images.decodeNanos(); }

    public long transformNanos() { return images.transformNanos(); }

    public long tokenizeNanos() { return tokenizeNanos; }

    /** Time spent in the cache of preprocessed samples since {@link #resetTimes()} (keys, reads, writes). */
    public long cacheNanos() {
        return images.cacheNanos() + (videos == null ? 0 : videos.cacheNanos() - videoCacheNanosMark) + (omni == null ? 0 : omni.cacheNanos());
    }

    /**
     * Reads and writes preprocessed images and videos (their resized frames) through {@code cache} (null: none) from now
     * on: its entries are served instead of decoding and resizing again, bit for bit what decoding would give.
     */
    public SampleEncoder useCache(dev.stoker.encode.cache.PreprocessedCache cache) {
        this.cache = cache;
        images.useCache(cache);
        if (videos != null) videos.useCache(cache);
        if (omni != null) omni.useCache(cache); // each clip's log-mel features (issue 32)
        return this;
    }

    public void resetTimes() {
        images.resetTimes();
        if (omni != null) omni.resetCacheNanos();
        tokenizeNanos = 0;
        if (videos != null) {
            videoNanosMark = videos.decodeNanos();
            videoFramesDecodedMark = videos.framesDecoded();
            videoFramesKeptMark = videos.framesKept();
            videoCacheNanosMark = videos.cacheNanos();
        }
        if (omni != null) {
            audioClipsMark = omni.clipsEncoded();
            audioSamplesMark = omni.samplesEncoded();
            audioDecodeNanosMark = omni.decodeNanos();
            audioFeatureNanosMark = omni.featureNanos();
            audioFeatureBytesMark = omni.featureBytes();
        }
    }

    private long videoNanosMark, videoFramesDecodedMark, videoFramesKeptMark, videoCacheNanosMark;
    private long audioClipsMark, audioSamplesMark, audioDecodeNanosMark, audioFeatureNanosMark, audioFeatureBytesMark;

    /**
     * Audio clips in the samples encoded since {@link #resetTimes()}, decoded or from the cache (an audio family's encoder;
     * 0 otherwise): as {@code encodedSamples} counts samples, so a sample encoded again counts again.
     */
    public long audioClips() { return omni == null ? 0 : omni.clipsEncoded() - audioClipsMark; }

    /** Their 16 kHz samples: seconds of audio × 16,000. */
    public long audioSamples() { return omni == null ? 0 : omni.samplesEncoded() - audioSamplesMark; }

    /** Time spent decoding clips (demux, decode, resample to 16 kHz mono) since {@link #resetTimes()}. */
    public long audioDecodeNanos() { return omni == null ? 0 : omni.decodeNanos() - audioDecodeNanosMark; }

    /** Time spent computing clips' log-mel features since {@link #resetTimes()}. */
    public long audioFeatureNanos() { return omni == null ? 0 : omni.featureNanos() - audioFeatureNanosMark; }

    /** Bytes of {@code input_features} and {@code feature_attention_mask} made since {@link #resetTimes()}. */
    public long audioFeatureBytes() { return omni == null ? 0 : omni.featureBytes() - audioFeatureBytesMark; }

    /** Time spent decoding videos (sampled frames, their RGB conversion and resize) since {@link #resetTimes()}. */
    public long videoDecodeNanos() { return videos == null ? 0 : videos.decodeNanos() - videoNanosMark; }

    /** Video frames libavcodec produced since {@link #resetTimes()}, kept or not. */
    public long videoFramesDecoded() { return videos == null ? 0 : videos.framesDecoded() - videoFramesDecodedMark; }

    /** Video frames kept since {@link #resetTimes()}. */
    public long videoFramesKept() { return videos == null ? 0 : videos.framesKept() - videoFramesKeptMark; }

    private long tokenizeNanos;



    /** Encodes one JSONL line (raw bytes, UTF-8 validated); images are read through {@code source}. */
    public EncodedSample encodeLine(byte[] line, String fallbackId, ImageSource source) {
        return encode(parser.parseLine(line, fallbackId), source);
    }

    /** {@link #encodeLine(byte[], String, ImageSource)} writing pixel_values into an array from {@code buffers}. */
    public EncodedSample encodeLine(byte[] line, String fallbackId, ImageSource source, PixelBuffers buffers) {
        return encode(parser.parseLine(line, fallbackId), source, buffers);
    }

    /**
     * Encodes record {@code record} of a source, whatever its format: its images are those the source carries (a tar's
     * members, a Parquet column), each taking the place of the record's k-th image in order, or else read through
     * {@code source} by the references the record names (a manifest's).
     */
    public EncodedSample encodeRecord(SampleRecords.Record record, String fallbackId, ImageSource source, PixelBuffers buffers) {
        return encodeRecord(record, fallbackId, source, null, buffers);
    }

    /**
     * {@link #encodeRecord(SampleRecords.Record, String, ImageSource, PixelBuffers)} for a record that may hold videos: those
     * its source carries ({@link SampleRecords.Record#videos()}, each taking the place of the record's k-th video), else read
     * through {@code videosByReference} (null: none can be). An encoder without video refuses a record with any; one with
     * video encodes every record as {@link #encode(ChatSample, ImageSource, VideoPreprocessor.VideoSource, PixelBuffers)}
     * does, as the feed does.
     */
    public EncodedSample encodeRecord(SampleRecords.Record record, String fallbackId, ImageSource source,
                                      VideoPreprocessor.VideoSource videosByReference, PixelBuffers buffers) {
        var embedded = record.images();
        ChatSample sample = parseRecord(record, fallbackId);
        ImageSource images = source;
        if (!embedded.isEmpty()) {
            List<String> refs = sample.imagePaths();
            var bytes = new HashMap<String, byte[]>(refs.size() * 2);
            for (int k = 0; k < refs.size(); k++) bytes.put(refs.get(k), embedded.get(k).bytes());
            images = fetched(bytes);
        }
        if (videos == null) return encode(sample, images, buffers);
        return encode(sample, images, dev.stoker.encode.video.EmbeddedVideos.over(record.videos(), videosByReference), buffers);
    }

    /**
     * Parses record {@code record} of a source: the images, videos and audio clips its source carries take the places of
     * the record's own, in order (or are refused, by a parser that takes none of that medium).
     */
    public ChatSample parseRecord(SampleRecords.Record record, String fallbackId) {
        return record.carriesMedia() ? parser.parseRecord(record.json(), fallbackId, record.imageNames(), record.videoNames(), record.audioNames())
                : parser.parseLine(record.json(), fallbackId);
    }

    /**
     * The source {@link #encodeAudioSample} reads a record's images and clips through: those its source carries (by the
     * names {@link #parseRecord(SampleRecords.Record, String)} placed), else {@code byReference}.
     */
    public static ImageSource carried(SampleRecords.Record record, ChatSample sample, ImageSource byReference) {
        var bytes = new HashMap<String, byte[]>();
        List<String> refs = sample.imagePaths();
        if (!record.images().isEmpty())
            for (int k = 0; k < refs.size(); k++) bytes.put(refs.get(k), record.images().get(k).bytes());
        for (var a : record.audios()) bytes.put(a.name(), a.bytes());
        if (bytes.isEmpty()) return byReference;
        return (id, ref) -> {
            byte[] b = bytes.get(ref);
            return b != null ? b : byReference.read(id, ref);
        };
    }

    /** Encodes a parsed sample whose image bytes were fetched beforehand, keyed by reference. */
    public EncodedSample encode(ChatSample sample, Map<String, byte[]> imagesByReference) {
        return encode(sample, fetched(imagesByReference));
    }

    public EncodedSample encode(ChatSample sample, ImageSource source) {
        return encode(sample, source, PixelBuffers.FRESH);
    }

    /**
     * A sample ready for its pixels: images probed and planned, tokens built (so its token count,
     * pixel rows and grids are known), nothing decoded yet. Holds the fetched image bytes.
     */
    public record Prepared(String id, TextFeatures text, List<ImagePreprocessor.Planned> images, int rowLength,
                           EncodeOptions.PixelFormat pixelFormat, List<VideoPreprocessor.Planned> videos,
                           VideoPreprocessor.VideoSource videoSource, boolean videoSeconds) {
        /** A sample prepared without videos. */
        public Prepared(String id, TextFeatures text, List<ImagePreprocessor.Planned> images, int rowLength,
                        EncodeOptions.PixelFormat pixelFormat) {
            this(id, text, images, rowLength, pixelFormat, List.of(), null, false);
        }

        /** Rows of pixel_values_videos of the videos kept: Σ t·h·w. */
        public long videoRows() {
            long rows = 0;
            for (var v : videos) rows += v.rows();
            return rows;
        }

        /**
         * Bytes of this sample's video tensor in its format: its pixel_values_videos rows (float32), or in the compact
         * format its videos' resized frames ({@link VideoPreprocessor.Planned#clipBytes()}, u8).
         */
        public long videoBytes() {
            if (pixelFormat == EncodeOptions.PixelFormat.FLOAT32) return videoRows() * rowLength * Float.BYTES;
            long bytes = 0;
            for (var v : videos) bytes += v.clipBytes();
            return bytes;
        }

        /** Bytes of video {@code v}'s pixels in {@code format}. */
        static long videoBytes(VideoPreprocessor.Planned v, int rowLength, EncodeOptions.PixelFormat format) {
            return format == EncodeOptions.PixelFormat.FLOAT32 ? v.rows() * rowLength * Float.BYTES : v.clipBytes();
        }

        /** The batch shape's share of this sample's videos. */
        public dev.stoker.encode.batch.BatchShape.Videos videoShape() {
            return videos.isEmpty() ? dev.stoker.encode.batch.BatchShape.Videos.NONE
                    : new dev.stoker.encode.batch.BatchShape.Videos(videoRows(), videos.size(), videoSeconds,
                            pixelFormat == EncodeOptions.PixelFormat.UINT8 ? videoBytes() : 0);
        }

        /** The kept videos' frame counts T (the compact format's {@code video_frame_counts}). */
        public long[] videoFrameCounts() {
            long[] counts = new long[videos.size()];
            for (int k = 0; k < counts.length; k++) counts[k] = videos.get(k).plan().frameCount();
            return counts;
        }

        /** The kept videos' {@code video_grid_thw} rows. */
        public long[] videoGridThw() {
            long[] grid = new long[videos.size() * 3];
            for (int k = 0; k < videos.size(); k++) System.arraycopy(videos.get(k).plan().gridThw(), 0, grid, 3 * k, 3);
            return grid;
        }

        /** The kept videos' {@code second_per_grid_ts} (Qwen2.5-VL; empty otherwise). */
        public float[] secondPerGridTs() {
            float[] s = new float[videoSeconds ? videos.size() : 0];
            for (int k = 0; k < s.length; k++) s[k] = videos.get(k).plan().secondPerGridT();
            return s;
        }

        /** Rows of pixel_values of the images kept. */
        public long pixelRows() {
            long rows = 0;
            for (var p : images) rows += p.plan().rows();
            return rows;
        }

        /** Bytes of this sample's pixel tensor in its format: float32 pixel_values rows, or the resized u8 pixels. */
        public long pixelBytes() {
            if (pixelFormat == EncodeOptions.PixelFormat.FLOAT32) return pixelRows() * rowLength * Float.BYTES;
            long bytes = 0;
            for (var p : images) bytes += p.plan().resizedByteSize();
            return bytes;
        }

        /** Bytes of image {@code img}'s pixels in this sample's format. */
        static long imageBytes(ImagePreprocessor.Planned img, EncodeOptions.PixelFormat format) {
            return format == EncodeOptions.PixelFormat.FLOAT32 ? img.plan().byteSize() : img.plan().resizedByteSize();
        }

        public int length() { return text.length(); }

        public long[] gridThw() {
            long[] grid = new long[images.size() * 3];
            for (int k = 0; k < images.size(); k++) System.arraycopy(images.get(k).gridThw(), 0, grid, 3 * k, 3);
            return grid;
        }
    }

    /**
     * The cheap first half of {@link #encode}: reads every image's header, plans its resize and
     * builds the tokens (an over-long sample is refused here, before any pixel is decoded).
     */
    public Prepared prepare(ChatSample sample, ImageSource source) {
        return prepare(sample, source, null);
    }

    /**
     * {@link #prepare(ChatSample, ImageSource)} for a sample that may hold videos, opened through {@code videoSource}: each
     * video indexed (demuxed, not decoded) and planned, so its grid, tokens and rows are known; nothing decoded.
     */
    public Prepared prepare(ChatSample sample, ImageSource source, VideoPreprocessor.VideoSource videoSource) {
        if (omni != null) throw new IllegalStateException(options.audio().preset() + ": audio samples are encoded whole (encodeAudioSample, encodeAudioForBatch), not prepared");
        String id = sample.id();
        List<String> refs = sample.imagePaths();
        var planned = new ArrayList<ImagePreprocessor.Planned>(refs.size());
        var grids = plan(sample, source, planned);
        if (sample.videos().isEmpty()) {
            long t0 = System.nanoTime();
            TextFeatures text = cache == null ? tokens.build(sample, grids) : cachedText(sample, grids);
            tokenizeNanos += System.nanoTime() - t0;
            return new Prepared(id, text, List.copyOf(planned.subList(0, text.imagesKept())), options.vision().rowLength(),
                    options.pixelFormat());
        }
        var plannedVideos = new ArrayList<VideoPreprocessor.Planned>();
        var videoTokens = new ArrayList<dev.stoker.text.VideoTokens>();
        planVideos(sample, videoSource == null ? NO_VIDEOS : videoSource, source, plannedVideos, videoTokens);
        long t0 = System.nanoTime();
        TextFeatures text = tokens.build(sample, grids, videoTokens);
        tokenizeNanos += System.nanoTime() - t0;
        return new Prepared(id, text, List.copyOf(planned.subList(0, text.imagesKept())), options.vision().rowLength(),
                options.pixelFormat(), List.copyOf(plannedVideos.subList(0, text.videosKept())), videoSource,
                options.preset() == dev.stoker.core.ProcessorPreset.QWEN2_5_VL);
    }

    /**
     * A sample's token-side inputs from the cache (its messages and image grids under this encoder's text settings:
     * {@link dev.stoker.encode.cache.PreprocessedCache#textKey}), or built and stored; a sample the builder refuses (over
     * the sequence limit) is refused as without the cache, and nothing is stored for it.
     */
    private TextFeatures cachedText(ChatSample sample, List<long[]> grids) {
        var key = dev.stoker.encode.cache.PreprocessedCache.textKey(options, tokenizerIdentity, sample, grids);
        byte[] bytes = cache.store().read(key, dev.stoker.encode.cache.PreprocessedCache.MAX_TEXT_ENTRY_BYTES);
        TextFeatures text = bytes == null ? null : dev.stoker.encode.cache.PreprocessedCache.text(bytes);
        if (text != null && text.imagesKept() <= grids.size()) return text;
        text = tokens.build(sample, grids);
        byte[] entry = dev.stoker.encode.cache.PreprocessedCache.textBytes(text);
        if (entry.length <= dev.stoker.encode.cache.PreprocessedCache.MAX_TEXT_ENTRY_BYTES) cache.store().write(key, entry, 0, entry.length);
        return text;
    }

    /**
     * The image limit, then each image's header and resize plan into {@code planned}; returns their grids. A failure
     * names the sample and the image.
     */
    private List<long[]> plan(ChatSample sample, ImageSource source, List<ImagePreprocessor.Planned> planned) {
        String id = sample.id();
        List<String> refs = sample.imagePaths();
        if (options.maxImages() > 0 && refs.size() > options.maxImages())
            throw SampleException.filtered(id, SampleException.Stage.MANIFEST, "over --max-images", "has " + refs.size() + " images, more than --max-images "
                    + options.maxImages() + " (the limit the shared-memory budget was sized for)");
        var grids = new ArrayList<long[]>(refs.size());
        for (String ref : refs) {
            try {
                var p = images.plan(source.read(id, ref), ref);
                planned.add(p);
                grids.add(p.gridThw());
            } catch (SampleException e) {
                throw inSample(id, ref, e);
            }
        }
        return grids;
    }

    /**
     * The length of the {@code input_ids} {@link #prepare} would build for {@code sample}, refusing what it refuses with
     * the same exceptions (limits, image headers, smart_resize, template, tokenizer), without building labels or
     * positions: for checking a whole data set. Reads only image headers.
     */
    public int measure(ChatSample sample, Map<String, byte[]> imagesByReference) {
        return measure(sample, imagesByReference, NO_VIDEOS);
    }

    /**
     * {@link #measure(ChatSample, Map)} for a sample that may hold videos: each video indexed (demuxed, never decoded)
     * through {@code videoSource} and planned, its tokens counted as {@link #encode(ChatSample, ImageSource,
     * VideoPreprocessor.VideoSource)} counts them; refuses what that refuses before decoding (a missing or broken
     * video, a video the sampler refuses, the decode memory budget, the sequence limit), naming the sample and the video.
     */
    public int measure(ChatSample sample, Map<String, byte[]> imagesByReference, VideoPreprocessor.VideoSource videoSource) {
        var grids = plan(sample, fetched(imagesByReference), new ArrayList<>(sample.imagePaths().size()));
        var videoTokens = new ArrayList<dev.stoker.text.VideoTokens>();
        planVideos(sample, videoSource, fetched(imagesByReference), new ArrayList<>(), videoTokens);
        long t0 = System.nanoTime();
        int length = tokens.measure(sample, grids, videoTokens).length();
        tokenizeNanos += System.nanoTime() - t0;
        return length;
    }

    /**
     * The images a sample's frame-list videos name ({@link dev.stoker.text.Message.Video#frames()}), in order, each once
     * and none that is also one of its images: what a fetcher reads besides {@link ChatSample#imagePaths()} so that
     * {@link #prepare(ChatSample, Map, VideoPreprocessor.VideoSource)} finds them among the fetched bytes.
     */
    public static List<String> frameReferences(ChatSample sample) {
        var out = new java.util.LinkedHashSet<String>();
        for (var v : sample.videos()) if (v.isFrameList()) out.addAll(v.frames());
        sample.imagePaths().forEach(out::remove);
        return List.copyOf(out);
    }

    /** A video source for samples that must have none: asked for one, it refuses (the sample names a video it cannot read). */
    private static final VideoPreprocessor.VideoSource NO_VIDEOS = (id, ref) -> {
        throw new java.io.IOException("no video source was given for video " + ref);
    };

    /**
     * Each of the sample's videos indexed and planned into {@code planned} and its tokens into {@code videoTokens}; none
     * for a sample without videos. A sample with videos needs an encoder made with video.
     */
    private void planVideos(ChatSample sample, VideoPreprocessor.VideoSource videoSource, ImageSource frameImages,
                            List<VideoPreprocessor.Planned> planned, List<dev.stoker.text.VideoTokens> videoTokens) {
        if (sample.videos().isEmpty()) return;
        if (videos == null)
            throw new SampleException(sample.id(), SampleException.Stage.MANIFEST, "has " + sample.videos().size()
                    + " video(s) but this encoder was made without video");
        for (var v : sample.videos()) {
            var p = videos.plan(sample.id(), v, videoSource, frameImages);
            planned.add(p);
            videoTokens.add(videos.tokens(p));
        }
    }

    /**
     * The sample's size as the pack planner needs it, known before decoding: its {@code input_ids} length (as
     * {@link #measure}) and, per image kept (all of them but under {@code --truncation truncate}), its patch count
     * {@code t·h·w}, the rows of its {@code pixel_values}. Refuses exactly what {@link #measure} refuses, with the same
     * exceptions; reads only image headers.
     */
    public dev.stoker.plan.pack.SampleShape shape(ChatSample sample, Map<String, byte[]> imagesByReference) {
        return shape(sample, imagesByReference, NO_VIDEOS);
    }

    /**
     * {@link #shape(ChatSample, Map)} for a sample that may hold videos: also, per video kept (all of them but under
     * {@code --truncation truncate}), its patch count {@code t·h·w} (the rows of its {@code pixel_values_videos}) and its
     * temporal groups {@code t}, from its frame index through {@code videoSource} (demuxed, never decoded). Refuses
     * exactly what {@link #measure(ChatSample, Map, VideoPreprocessor.VideoSource)} refuses.
     */
    public dev.stoker.plan.pack.SampleShape shape(ChatSample sample, Map<String, byte[]> imagesByReference,
                                                 VideoPreprocessor.VideoSource videoSource) {
        if (omni != null) return omni.shape(sample, imagesByReference, videoSource);
        var planned = new ArrayList<ImagePreprocessor.Planned>(sample.imagePaths().size());
        var grids = plan(sample, fetched(imagesByReference), planned);
        var plannedVideos = new ArrayList<VideoPreprocessor.Planned>(sample.videos().size());
        var videoTokens = new ArrayList<dev.stoker.text.VideoTokens>(sample.videos().size());
        planVideos(sample, videoSource, fetched(imagesByReference), plannedVideos, videoTokens);
        long t0 = System.nanoTime();
        var measured = tokens.measure(sample, grids, videoTokens);
        tokenizeNanos += System.nanoTime() - t0;
        int[] patches = new int[measured.imagesKept()];
        for (int k = 0; k < patches.length; k++) patches[k] = planned.get(k).plan().rows();
        int[] videoPatches = new int[measured.videosKept()], videoGroups = new int[measured.videosKept()];
        for (int k = 0; k < videoPatches.length; k++) {
            var p = plannedVideos.get(k);
            if (p.rows() > Integer.MAX_VALUE - 8)
                throw new SampleException(sample.id(), SampleException.Stage.TRANSFORM, "video " + p.reference() + ": " + p.rows()
                        + " patches, too many for one sample");
            videoPatches[k] = (int) p.rows();
            videoGroups[k] = p.plan().gridT();
        }
        return dev.stoker.plan.pack.SampleShape.of(measured.length(), patches, videoPatches, videoGroups);
    }

    /** {@link #prepare(ChatSample, ImageSource)} over image bytes fetched beforehand, keyed by reference. */
    public Prepared prepare(ChatSample sample, Map<String, byte[]> imagesByReference) {
        return prepare(sample, fetched(imagesByReference));
    }

    /** {@link #prepare(ChatSample, ImageSource, VideoPreprocessor.VideoSource)} over image bytes fetched beforehand. */
    public Prepared prepare(ChatSample sample, Map<String, byte[]> imagesByReference, VideoPreprocessor.VideoSource videoSource) {
        return prepare(sample, fetched(imagesByReference), videoSource);
    }

    /** Encodes a sample whose image bytes were fetched beforehand and whose videos are read through {@code videoSource}. */
    public EncodedSample encode(ChatSample sample, Map<String, byte[]> imagesByReference, VideoPreprocessor.VideoSource videoSource) {
        return encode(sample, fetched(imagesByReference), videoSource, PixelBuffers.FRESH);
    }

    /**
     * The expensive second half: decodes, resizes, normalizes and patchifies the prepared images,
     * writing their pixel_values rows ({@link Prepared#pixelBytes()} bytes, little-endian float32)
     * into {@code dst} from byte {@code offsetBytes} — the batch's shared-memory segment, so that
     * nothing is copied after the transform. In the compact wire format it stops after the resize and
     * writes each image's u8 RGB pixels there instead.
     */
    public void writePixels(Prepared p, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        boolean compact = p.pixelFormat() == EncodeOptions.PixelFormat.UINT8;
        long offset = offsetBytes;
        for (var img : p.images()) {
            try {
                if (compact) images.processResizedInto(img, dst, offset);
                else images.processInto(img, dst, offset);
            } catch (SampleException e) {
                throw inSample(p.id(), img.name(), e);
            }
            offset += Prepared.imageBytes(img, p.pixelFormat());
        }
    }

    /**
     * Decodes the prepared videos' sampled frames and writes their {@code pixel_values_videos} rows
     * ({@link Prepared#videoBytes()} bytes, little-endian float32) into {@code dst} from byte {@code offsetBytes}; in the
     * compact wire format each video's resized frames instead ({@code pixel_values_videos_u8}), in the same place.
     */
    public void writeVideoPixels(Prepared p, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        boolean compact = p.pixelFormat() == EncodeOptions.PixelFormat.UINT8;
        long offset = offsetBytes;
        for (var v : p.videos()) {
            if (compact) videos.writeResized(p.id(), v, p.videoSource(), dst, offset);
            else videos.writePixels(p.id(), v, p.videoSource(), dst, offset);
            offset += Prepared.videoBytes(v, p.rowLength(), p.pixelFormat());
        }
    }

    /**
     * Encodes a sample with images and videos into every model input, the videos' tensors included
     * ({@link EncodedSample#videos()}): images and videos planned, tokens built (an over-long sample is refused before
     * any pixel), then the images kept decoded and transformed, and the videos kept decoded (their sampled frames only),
     * resized, normalized and patchified; in the compact wire format (UINT8) the videos' resized frames and their frame
     * counts instead ({@link VideoTensors#pixelsU8()}). Needs an encoder made with video.
     */
    public EncodedSample encode(ChatSample sample, ImageSource source, VideoPreprocessor.VideoSource videoSource) {
        if (videos == null) throw new IllegalStateException("this encoder was made without video");
        return encode(sample, source, videoSource, PixelBuffers.FRESH);
    }

    /** {@link #encode(ChatSample, ImageSource, VideoPreprocessor.VideoSource)} writing pixel_values into an array from {@code buffers}. */
    public EncodedSample encode(ChatSample sample, ImageSource source, VideoPreprocessor.VideoSource videoSource, PixelBuffers buffers) {
        if (omni != null) return encodeAudioForBatch(sample, source, videoSource);
        Prepared prepared = prepare(sample, source, videoSource);
        EncodedSample w = encodeImages(prepared, buffers);
        if (videos == null) return w;
        String id = sample.id();
        var kept = prepared.videos();
        long rows = prepared.videoRows();
        int rowLength = videos.rowLength();
        long[] indices = kept.stream().flatMapToLong(p -> java.util.Arrays.stream(p.plan().frameIndices())).toArray();
        if (prepared.pixelFormat() == EncodeOptions.PixelFormat.UINT8) {
            long bytes = prepared.videoBytes();
            if (bytes > Integer.MAX_VALUE - 8)
                throw new SampleException(id, SampleException.Stage.TRANSFORM, "video frames of " + bytes + " bytes are too large for one sample");
            byte[] frames = new byte[(int) bytes];
            int at = 0;
            for (var p : kept) {
                videos.writeResized(id, p, videoSource, frames, at);
                at += (int) p.clipBytes();
            }
            return new EncodedSample(w.id(), w.inputIds(), w.labels(), w.attentionMask(), w.positionIds(), w.pixelValues(),
                    w.pixelRowLength(), w.imageGridThw(), w.sourcePixels(), w.pixelsU8(),
                    new VideoTensors(new float[0], rowLength, prepared.videoGridThw(), prepared.secondPerGridTs(), indices, frames,
                            prepared.videoFrameCounts()));
        }
        if (rows * rowLength > Integer.MAX_VALUE - 8)
            throw new SampleException(id, SampleException.Stage.TRANSFORM, "pixel_values_videos of " + rows + " rows is too large for one sample");
        float[] pixels = new float[(int) (rows * rowLength)];
        int offset = 0;
        for (var p : kept) {
            videos.writePixels(id, p, videoSource, pixels, offset);
            offset += (int) (p.rows() * rowLength);
        }
        return new EncodedSample(w.id(), w.inputIds(), w.labels(), w.attentionMask(), w.positionIds(), w.pixelValues(),
                w.pixelRowLength(), w.imageGridThw(), w.sourcePixels(), w.pixelsU8(),
                new VideoTensors(pixels, rowLength, prepared.videoGridThw(), prepared.secondPerGridTs(), indices));
    }

    /** Encodes a sample writing pixel_values into an array from {@code buffers}. */
    public EncodedSample encode(ChatSample sample, ImageSource source, PixelBuffers buffers) {
        if (!sample.videos().isEmpty()) {
            throw new SampleException(sample.id(), SampleException.Stage.TRANSFORM, "has " + sample.videos().size()
                    + " video(s): this path encodes images only (stoker encode encodes video; the feed does not yet)");
        }
        return encodeImages(prepare(sample, source), buffers);
    }

    private EncodedSample encodeImages(Prepared p, PixelBuffers buffers) {
        if (p.pixelFormat() == EncodeOptions.PixelFormat.UINT8) return encodeCompact(p);
        long rows = p.pixelRows();
        int rowLength = p.rowLength();
        if (rows * rowLength > Integer.MAX_VALUE - 8)
            throw new SampleException(p.id(), SampleException.Stage.TRANSFORM, "pixel_values of " + rows + " rows is too large for one sample");
        float[] pixels = buffers.get((int) (rows * rowLength));
        long sourcePixels = 0;
        int offset = 0;
        for (var img : p.images()) {
            try {
                images.processInto(img, pixels, offset);
            } catch (SampleException e) {
                throw inSample(p.id(), img.name(), e);
            }
            offset += img.plan().rows() * rowLength;
            sourcePixels += img.info().pixelCount();
        }
        var text = p.text();
        return new EncodedSample(p.id(), text.inputIds(), text.labels(), text.attentionMask(), text.positionIds(),
                pixels, rowLength, p.gridThw(), sourcePixels);
    }

    /** The compact wire format's half of {@link #encode}: each image's resized u8 pixels into one exact array. */
    private EncodedSample encodeCompact(Prepared p) {
        long bytes = p.pixelBytes();
        if (bytes > Integer.MAX_VALUE - 8)
            throw new SampleException(p.id(), SampleException.Stage.TRANSFORM, "pixels of " + bytes + " bytes are too large for one sample");
        byte[] pixels = new byte[(int) bytes];
        long sourcePixels = 0;
        int offset = 0;
        for (var img : p.images()) {
            try {
                images.processResizedInto(img, pixels, offset);
            } catch (SampleException e) {
                throw inSample(p.id(), img.name(), e);
            }
            offset += (int) img.plan().resizedByteSize();
            sourcePixels += img.info().pixelCount();
        }
        var text = p.text();
        return new EncodedSample(p.id(), text.inputIds(), text.labels(), text.attentionMask(), text.positionIds(),
                new float[0], p.rowLength(), p.gridThw(), sourcePixels, pixels);
    }

    private static ImageSource fetched(Map<String, byte[]> imagesByReference) {
        return (id, ref) -> {
            byte[] bytes = imagesByReference.get(ref);
            if (bytes == null) throw new SampleException(id, SampleException.Stage.FETCH, "image '" + ref + "' was not fetched");
            return bytes;
        };
    }

    /** The error re-labelled {@code sample (image)}, so a report names both. */
    private static SampleException inSample(String sampleId, String ref, SampleException e) {
        return e.withSampleId(sampleId + " (" + ref + ")");
    }
}
