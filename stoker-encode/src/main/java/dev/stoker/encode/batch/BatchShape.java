package dev.stoker.encode.batch;

import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import java.util.List;

/**
 * The shape of a padded batch or of a pack, known before any array is filled, so a destination (heap arrays or
 * a shared-memory object) can be sized first and written once; {@link BatchSchema} turns it into tensors.
 *
 * <p>A pack ({@code packed}, {@link PackAssembler}) is one row of whole samples without padding between them:
 * {@code length} is then T, the row's tokens (its tail pad included), and {@code segments} the pack's segments — its
 * samples and the dummy-image segment when it has one — which size {@code sample_index} and {@code cu_seqlens}.
 * A padded batch has {@code segments == samples}.
 *
 * @param samples         B, the samples in the batch (a pack's real samples: the dummy segment is not one)
 * @param length          L, the longest sample's token count (0 for an empty batch); a pack's T
 * @param pixelRows       rows of {@code pixel_values}, all images of all samples (in either pixel format)
 * @param pixelRowLength  floats per row (3·temporal·patch²; 0 when no sample has an image)
 * @param images          rows of {@code image_grid_thw}
 * @param pixelFormat     FLOAT32: {@code pixel_values}; UINT8: {@code pixel_values_u8} of {@code pixelU8Bytes}
 * @param pixelU8Bytes    bytes of the resized u8 pixels of all images (0 in FLOAT32)
 * @param inputContract   which model inputs the batch carries ({@code mm_token_type_ids} or not) and how it is padded
 * @param videos          the batch's videos ({@link Videos#NONE} for a batch without any: it carries no video tensor);
 *                        their u8 bytes in UINT8
 * @param audio           the batch's audio clips ({@link Audio#NONE} for a batch without any: it carries no audio tensor)
 * @param positions       the layout of its {@code position_ids}: {@link Positions#MROPE} but in an audio family's batch
 */
public record BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                          long pixelU8Bytes, InputContract inputContract, int segments, boolean packed, Videos videos, Audio audio,
                          Positions positions) {
    /**
     * The layout of a padded batch's {@code position_ids} (issue 32: the audio families number their tokens differently;
     * {@link BatchSchema} documents each).
     */
    public enum Positions {
        /** int64 (3, B, L): the Qwen-VL families' and Qwen2.5-Omni's M-RoPE (a pack's int64 (4, 1, T)). */
        MROPE,
        /** int64 (B, L): Qwen2-Audio's plain Qwen2 positions, each sample's {@code 0 … L_i−1} (a pack's int64 (1, T)). */
        TEXT,
        /** float32 (3, B, L): Qwen3-Omni's M-RoPE, whose temporal index may be fractional (a pack's float32 (4, 1, T)). */
        MROPE_FLOAT;

        /** Rows of one sample's positions: 3, or 1 for {@link #TEXT}. */
        public int rows() { return this == TEXT ? 1 : 3; }

        /**
         * Rows of a pack's positions (docs/packing.md "Audio packs"): 4 — row 0 each segment's text positions, rows 1–3 its
         * M-RoPE — or 1 for {@link #TEXT}, whose one row is the text positions.
         */
        public int packRows() { return this == TEXT ? 1 : 4; }
    }

    /** A shape with the Qwen-VL families' M-RoPE positions. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                      long pixelU8Bytes, InputContract inputContract, int segments, boolean packed, Videos videos, Audio audio) {
        this(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, packed, videos, audio,
                Positions.MROPE);
    }

    /** This shape with {@code p} as the layout of its {@code position_ids}. */
    public BatchShape withPositions(Positions p) {
        return new BatchShape(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, packed, videos, audio, p);
    }

    /**
     * A batch's audio clips (issue 32): {@code input_features} (clips, 128, frames) float32 and {@code feature_attention_mask}
     * (clips, frames) int32, every sample's clips in batch order, {@code frames} the longest sample's.
     */
    public record Audio(int clips, int frames) {
        /** No audio: the batch carries no audio tensor. */
        public static final Audio NONE = new Audio(0, 0);

        public Audio {
            if (clips < 0 || frames < 0 || clips == 0 && frames != 0)
                throw new IllegalArgumentException("audio of " + clips + " clips × " + frames + " frames");
        }

        /** Both together, in order: the clips added, the frames the longer. */
        public Audio plus(Audio other) {
            if (other.clips == 0) return this;
            if (clips == 0) return other;
            return new Audio(clips + other.clips, Math.max(frames, other.frames));
        }
    }

    /** A shape without audio. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                      long pixelU8Bytes, InputContract inputContract, int segments, boolean packed, Videos videos) {
        this(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, packed, videos, Audio.NONE);
    }

    /** This shape holding {@code a} as its audio clips. */
    public BatchShape withAudio(Audio a) {
        return new BatchShape(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, packed, videos, a, positions);
    }
    /**
     * A batch's videos (issue 29): {@code pixel_values_videos} (rows, the model's row length) float32,
     * {@code video_grid_thw} (count, 3) and, for Qwen2.5-VL ({@code seconds}), {@code second_per_grid_ts} (count) float32;
     * in the compact wire format {@code pixel_values_videos_u8} of {@code u8Bytes} bytes instead of the float rows, and
     * {@code video_frame_counts} (count).
     *
     * @param rows    rows of {@code pixel_values_videos}: Σ t·h·w over the videos (what the trainer's conversion yields in
     *                UINT8)
     * @param count   videos, rows of {@code video_grid_thw}
     * @param seconds whether the batch carries {@code second_per_grid_ts} (Qwen2.5-VL)
     * @param u8Bytes bytes of the videos' resized frames, Σ T·H·W·3 (the compact format; 0 in FLOAT32)
     */
    public record Videos(long rows, int count, boolean seconds, long u8Bytes) {
        /** No video: the batch carries no video tensor. */
        public static final Videos NONE = new Videos(0, 0, false, 0);

        public Videos {
            if (rows < 0 || count < 0 || u8Bytes < 0 || count == 0 && (rows != 0 || u8Bytes != 0))
                throw new IllegalArgumentException("videos of " + rows + " rows and " + u8Bytes + " u8 bytes in " + count + " videos");
        }

        /** FLOAT32 videos. */
        public Videos(long rows, int count, boolean seconds) { this(rows, count, seconds, 0); }

        /** Both together, in order (a batch's samples). */
        public Videos plus(Videos other) {
            if (other.count == 0) return this;
            if (count == 0) return other;
            if (seconds != other.seconds) throw new IllegalArgumentException("videos with and without second_per_grid_ts in one batch");
            return new Videos(rows + other.rows, count + other.count, seconds, u8Bytes + other.u8Bytes);
        }
    }

    /** A shape without videos. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                      long pixelU8Bytes, InputContract inputContract, int segments, boolean packed) {
        this(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, packed, Videos.NONE);
    }

    /** This shape holding {@code v} as its videos. */
    public BatchShape withVideos(Videos v) {
        return new BatchShape(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, packed, v, audio, positions);
    }

    /** Images and videos: what runs the vision tower (a batch with neither gets the dummy image under DUMMY_IMAGE). */
    public int visualInputs() { return images + videos.count; }

    public BatchShape {
        java.util.Objects.requireNonNull(videos, "videos");
        java.util.Objects.requireNonNull(audio, "audio");
        java.util.Objects.requireNonNull(positions, "positions");
        java.util.Objects.requireNonNull(pixelFormat, "pixelFormat");
        java.util.Objects.requireNonNull(inputContract, "inputContract");
        if (samples < 0 || length < 0 || pixelRows < 0 || images < 0 || pixelU8Bytes < 0)
            throw new IllegalArgumentException("negative batch shape: " + samples + " samples, " + length + " tokens, " + pixelRows
                    + " pixel rows, " + images + " images, " + pixelU8Bytes + " u8 bytes");
        if (pixelFormat == PixelFormat.FLOAT32 && videos.u8Bytes() != 0)
            throw new IllegalArgumentException("a FLOAT32 batch with " + videos.u8Bytes() + " bytes of compact video frames");
        if (packed ? segments < samples || segments > samples + 1 : segments != samples)
            throw new IllegalArgumentException((packed ? "a pack of " : "a padded batch of ") + samples + " samples has " + segments
                    + " segments");
    }

    /** A padded batch's shape: one segment per sample. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                      long pixelU8Bytes, InputContract inputContract) {
        this(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, samples, false);
    }

    /**
     * A pack's shape: {@code samples} real samples in {@code segments} segments (one more with the dummy image), a row of
     * {@code length} tokens (T, the tail pad included).
     */
    public static BatchShape packed(int samples, int segments, int length, long pixelRows, int pixelRowLength, int images,
                                    PixelFormat pixelFormat, long pixelU8Bytes, InputContract inputContract) {
        return new BatchShape(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, inputContract, segments, true);
    }

    /** A FLOAT32 layout of the default input contract. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images) {
        this(samples, length, pixelRows, pixelRowLength, images, PixelFormat.FLOAT32, 0);
    }

    /** A layout of the default input contract. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat, long pixelU8Bytes) {
        this(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, EncodeOptions.DEFAULT_INPUT_CONTRACT);
    }

    /** The layout of a FLOAT32 batch of {@code batch}. */
    public static BatchShape of(List<EncodedSample> batch) { return of(batch, PixelFormat.FLOAT32); }

    /** The layout of a batch of {@code batch} in {@code format}, of the default input contract. */
    public static BatchShape of(List<EncodedSample> batch, PixelFormat format) { return of(batch, format, EncodeOptions.DEFAULT_INPUT_CONTRACT); }

    /** The layout of a batch of {@code batch} in {@code format} under {@code contract}; every sample must have been encoded in the format. */
    public static BatchShape of(List<EncodedSample> batch, PixelFormat format, InputContract contract) {
        int length = 0, rowLength = 0, images = 0;
        long rows = 0, u8 = 0;
        Videos videos = Videos.NONE;
        Audio audio = Audio.NONE;
        Positions positions = null;
        for (var s : batch) {
            if (s.audio() != null) audio = audio.plus(new Audio(s.audio().clips(), s.audio().frames()));
            var p = positionsOf(s);
            if (positions != null && p != positions)
                throw new IllegalArgumentException("sample " + s.id() + " has " + p + " position_ids, the batch " + positions);
            positions = p;
            var v = s.videos();
            if (v != null && v.videos() > 0) {
                if (v.compact() != (format == PixelFormat.UINT8))
                    throw new IllegalArgumentException("sample " + s.id() + "'s videos were encoded " + (v.compact() ? "as UINT8" : "as FLOAT32")
                            + ", the batch is " + format);
                videos = videos.plus(new Videos(v.rows(), v.videos(), v.secondPerGridTs().length > 0, v.compact() ? v.pixelsU8().length : 0));
            }
            if (s.compact() != (format == PixelFormat.UINT8))
                throw new IllegalArgumentException("sample " + s.id() + " was encoded " + (s.compact() ? "as UINT8" : "as FLOAT32")
                        + ", the batch is " + format);
            length = Math.max(length, s.length());
            rows += s.pixelRows();
            u8 += s.pixelU8Bytes();
            images += s.images();
            if (s.pixelRows() > 0) {
                if (rowLength != 0 && rowLength != s.pixelRowLength())
                    throw new IllegalArgumentException("sample " + s.id() + " has pixel rows of " + s.pixelRowLength()
                            + " floats, the batch has " + rowLength);
                rowLength = s.pixelRowLength();
            }
        }
        return new BatchShape(batch.size(), length, rows, rowLength, images, format, u8, contract).withVideos(videos).withAudio(audio)
                .withPositions(positions == null ? Positions.MROPE : positions);
    }

    /**
     * The layout of {@code s}'s positions: float32 ones ({@link EncodedSample#floatPositionIds()}) are Qwen3-Omni's, one
     * row of L Qwen2-Audio's, else 3 rows of L.
     */
    static Positions positionsOf(EncodedSample s) {
        int n = s.length();
        if (s.floatPositionIds() != null) {
            if (s.floatPositionIds().length != 3L * n)
                throw new IllegalArgumentException("sample " + s.id() + " has " + s.floatPositionIds().length + " float position_ids for " + n + " tokens");
            return Positions.MROPE_FLOAT;
        }
        if (s.positionIds().length == 3L * n) return Positions.MROPE;
        if (s.positionIds().length == n) return Positions.TEXT;
        throw new IllegalArgumentException("sample " + s.id() + " has " + s.positionIds().length + " position_ids for " + n + " tokens");
    }

    /** This shape with {@code length} tokens per sample and the one image of {@code rows} rows and {@code u8Bytes} compact bytes. */
    BatchShape withOneImage(int length, long rows, int rowLength, long u8Bytes) {
        if (packed) throw new IllegalStateException("a pack gets the dummy image as a segment of its own (PackAssembler)");
        return new BatchShape(samples, length, rows, rowLength, 1, pixelFormat, pixelFormat == PixelFormat.UINT8 ? u8Bytes : 0, inputContract)
                .withVideos(videos).withAudio(audio).withPositions(positions);
    }

    /** B·L, the elements of input_ids, labels and attention_mask; a pack's T. */
    public long tokens() { return packed ? length : (long) samples * length; }

    /** Floats of pixel_values in FLOAT32 (what the trainer's conversion yields in UINT8). */
    public long pixelFloats() { return pixelRows * pixelRowLength; }

    /** Bytes of the batch in the {@code STKB} layout of {@link BatchSchema}: header, descriptors, tensors and alignment. */
    public long sizeBytes() { return BatchSchema.plan(this, pixelRowLength).totalBytes(); }
}
