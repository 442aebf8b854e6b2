package dev.stoker.text;

import dev.stoker.core.AudioPreset;
import dev.stoker.text.OmniTokens.AudioClip;
import dev.stoker.text.OmniTokens.ImageGrid;
import dev.stoker.text.OmniTokens.Media;
import dev.stoker.text.OmniTokens.VideoGrid;
import java.util.ArrayList;
import java.util.List;

/**
 * M-RoPE positions of the Omni thinkers for one sample's expanded ids ({@link OmniTokens#expand}), all attended: ported
 * line by line from transformers 5.18.0 {@code Qwen2_5OmniPreTrainedModelForConditionalGeneration.get_rope_index} (integer
 * positions) and {@code Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_rope_index} (float32 positions: a video's
 * temporal index is {@code t · second_per_grid · 13} in float32, so positions may be fractional). Checked exactly (Qwen3:
 * bit for bit as float32) against those functions by {@code OmniFixturesTest}.
 *
 * <p>The rules in short. Text advances all three rows by one from one past the previous block's largest value. Audio
 * clips are 1-D runs after their {@code <|audio_bos|>}. An image or video is a (t, h, w) grid from the block start, t in
 * steps of {@code position_id_per_seconds} per second of media (an image: 0). A video with its audio: both bos tokens
 * share one position, then the video grid and the audio run start at the same index; Qwen2.5-Omni lays them out in 2 s
 * chunks (video chunk, audio chunk, …; chunk edges at multiples of 50 temporal positions, counted one edge per token as
 * {@code get_chunked_index} does), Qwen3-Omni token by token by temporal position (video first on ties); both eos tokens
 * share one position. "The previous block's largest value" is the largest over the three rows of the last block appended
 * only (not of the sequence so far), which matters after an interleaved video. Without any image or video grid both
 * functions return plain 1-D positions, as does Qwen2-Audio's language model always.
 *
 * <p>Threading: stateless.
 */
public final class OmniPositions {
    private OmniPositions() {}

    /** Qwen2.5-Omni's (or Qwen2-Audio's 1-D) positions: {@code [3][ids.length]}. */
    public static long[][] integer(long[] ids, AudioPreset preset, List<Media> media) {
        if (preset.positionRule() == AudioPreset.PositionRule.QWEN3_OMNI)
            throw new IllegalArgumentException(preset + " has float positions: use OmniPositions.float32");
        int n = ids.length;
        var sizes = Sizes.of(preset, media);
        if (preset.positionRule() == AudioPreset.PositionRule.TEXT_1D || (sizes.images.isEmpty() && sizes.videos.isEmpty())) {
            var p = new long[3][n];
            for (int r = 0; r < 3; r++) for (int i = 0; i < n; i++) p[r][i] = i;
            return p;
        }
        long image = preset.imageTokenId(), video = preset.videoTokenId(), audio = preset.audioTokenId();
        long visionStart = preset.visionStartId(), audioStart = preset.audioStartId();
        boolean aiv = sizes.audioInVideo;
        int imageNums = 0, videoNums = 0, audioNums = 0;
        for (int i = 0; i < n; i++) {
            if (ids[i] == audioStart) audioNums++;
            if (ids[i] == visionStart && i + 1 < n) {
                if (ids[i + 1] == image) imageNums++;
                if (aiv ? ids[i + 1] == audioStart : ids[i + 1] == video) videoNums++;
            }
        }
        int multimodal = aiv ? imageNums + audioNums : imageNums + videoNums + audioNums;
        var b = new LongRows(n);
        int st = 0, imageIdx = 0, videoIdx = 0, audioIdx = 0;
        int remainImages = imageNums, remainVideos = videoNums, remainAudios = audioNums;
        int pps = preset.positionIdPerSecond();
        for (int m = 0; m < multimodal; m++) {
            int edImage = remainImages > 0 ? indexOf(ids, image, st) : n + 1;
            int edVideo = remainVideos > 0 ? indexOf(ids, video, st) : n + 1;
            int edAudio = remainAudios > 0 ? indexOf(ids, audio, st) : n + 1;
            int minEd = Math.min(edImage, Math.min(edVideo, edAudio));
            if (minEd > n) throw new IllegalArgumentException("the ids hold fewer media tokens than their start tokens announce");
            if (minEd == edAudio) {
                int textLen = minEd - st - 1;
                if (textLen != 0) b.text(textLen, b.next());
                b.text(1, b.next());
                long audioLen = tokens(preset, sizes.audioFrames, audioIdx);
                b.text(audioLen, b.next());
                b.text(1, b.next());
                st += textLen + 1 + (int) audioLen + 1;
                audioIdx++;
                remainAudios--;
            } else if (minEd == edImage) {
                int textLen = minEd - st - 1;
                if (textLen != 0) b.text(textLen, b.next());
                b.text(1, b.next());
                var g = sizes.images.get(imageIdx);
                long[] t = new long[(int) g.t()];
                for (int k = 0; k < t.length; k++) t[k] = (long) k * pps;
                var grid = VisionBlock.of(t, g.h() / 2, g.w() / 2, b.next());
                b.block(grid, 0, grid.length());
                b.text(1, b.next());
                st += textLen + 1 + grid.length() + 1;
                imageIdx++;
                remainImages--;
            } else if (!aiv) {
                int textLen = minEd - st - 1;
                if (textLen != 0) b.text(textLen, b.next());
                b.text(1, b.next());
                var v = sizes.videos.get(videoIdx);
                var grid = VisionBlock.of(videoT(v, pps), v.h() / 2, v.w() / 2, b.next());
                b.block(grid, 0, grid.length());
                b.text(1, b.next());
                st += textLen + 1 + grid.length() + 1;
                videoIdx++;
                remainVideos--;
            } else {
                int textLen = minEd - st - 2;
                if (textLen != 0) b.text(textLen, b.next());
                long stIdx = b.next();
                b.text(1, stIdx);
                b.text(1, stIdx);
                stIdx = b.next();
                long audioLen = tokens(preset, sizes.audioFrames, audioIdx);
                var v = sizes.videos.get(videoIdx);
                var grid = VisionBlock.of(videoT(v, pps), v.h() / 2, v.w() / 2, stIdx);
                long perChunk = (long) (pps * preset.secondsPerChunk());
                final long base = stIdx;
                long[] videoChunks = OmniTokens.chunks(grid.length(), j -> grid.t[(int) j] - base, perChunk);
                long[] audioChunks = OmniTokens.chunks(audioLen, j -> j, perChunk);
                int vFrom = 0;
                long aFrom = 0;
                for (int c = 0; c < Math.max(videoChunks.length, audioChunks.length); c++) {
                    if (c < videoChunks.length) {
                        b.block(grid, vFrom, vFrom + (int) videoChunks[c]);
                        vFrom += (int) videoChunks[c];
                    }
                    if (c < audioChunks.length) {
                        b.text(audioChunks[c], stIdx + aFrom);
                        aFrom += audioChunks[c];
                    }
                }
                long eos = b.next();
                b.text(1, eos);
                b.text(1, eos);
                st += textLen + 2 + (int) audioLen + grid.length() + 2;
                audioIdx++;
                videoIdx++;
                remainVideos--;
                remainAudios--;
            }
        }
        if (st < n) b.text(n - st, b.next());
        return b.done();
    }

    /** Qwen3-Omni's positions as float32: {@code [3][ids.length]}. */
    public static float[][] float32(long[] ids, AudioPreset preset, List<Media> media) {
        if (preset.positionRule() != AudioPreset.PositionRule.QWEN3_OMNI)
            throw new IllegalArgumentException(preset + " has integer positions: use OmniPositions.integer");
        int n = ids.length;
        var sizes = Sizes.of(preset, media);
        if (sizes.images.isEmpty() && sizes.videos.isEmpty()) {
            var p = new float[3][n];
            for (int r = 0; r < 3; r++) for (int i = 0; i < n; i++) p[r][i] = i;
            return p;
        }
        long image = preset.imageTokenId(), video = preset.videoTokenId(), audio = preset.audioTokenId();
        long visionStart = preset.visionStartId(), audioStart = preset.audioStartId();
        boolean aiv = sizes.audioInVideo;
        boolean hasImageOrVideo = false, hasAudio = false;
        int imageNums = 0, videoNums = 0, audioNums = 0;
        for (int i = 0; i < n; i++) {
            if (ids[i] == audioStart) audioNums++;
            if (ids[i] == image || ids[i] == video) hasImageOrVideo = true;
            if (ids[i] == audio) hasAudio = true;
            if (ids[i] == visionStart && i + 1 < n) {
                if (ids[i + 1] == image) imageNums++;
                if (aiv ? ids[i + 1] == audioStart : ids[i + 1] == video) videoNums++;
            }
        }
        int multimodal = aiv ? imageNums + audioNums : imageNums + videoNums + audioNums;
        var b = new FloatRows(n);
        int st = 0, imageIdx = 0, videoIdx = 0, audioIdx = 0;
        int remainImages = imageNums, remainVideos = videoNums, remainAudios = audioNums;
        float pps = preset.positionIdPerSecond();
        for (int m = 0; m < multimodal; m++) {
            float stIdx = b.next();
            int edVisionStart = hasImageOrVideo && (remainVideos > 0 || remainImages > 0) ? indexOf(ids, visionStart, st) : n + 1;
            int edAudioStart = hasAudio && remainAudios > 0 ? indexOf(ids, audioStart, st) : n + 1;
            int minEd = Math.min(edVisionStart, edAudioStart);
            if (minEd > n) throw new IllegalArgumentException("the ids hold fewer media tokens than their start tokens announce");
            int textLen = minEd - st;
            if (textLen != 0) {
                b.text(textLen, stIdx);
                stIdx += textLen;
            }
            boolean audioInVideo = minEd == edVisionStart && edVisionStart + 1 == edAudioStart;
            int bosLen = audioInVideo ? 2 : 1, eosLen = bosLen;
            b.text(bosLen, stIdx);
            stIdx += bosLen;
            if (minEd == edAudioStart) {
                long audioLen = tokens(preset, sizes.audioFrames, audioIdx);
                b.text(audioLen, stIdx);
                st += (int) (textLen + bosLen + audioLen + eosLen);
                audioIdx++;
                remainAudios--;
            } else if (ids[edVisionStart + 1] == image) {
                var g = sizes.images.get(imageIdx);
                float[] t = new float[(int) g.t()];
                for (int k = 0; k < t.length; k++) t[k] = (float) ((long) k * preset.positionIdPerSecond());
                var grid = FloatVisionBlock.of(t, g.h() / 2, g.w() / 2, stIdx);
                b.block(grid, 0, grid.length());
                st += textLen + bosLen + grid.length() + eosLen;
                imageIdx++;
                remainImages--;
            } else if (ids[edVisionStart + 1] == video) {
                var v = sizes.videos.get(videoIdx);
                var grid = FloatVisionBlock.of(videoT3(v, pps), v.h() / 2, v.w() / 2, stIdx);
                b.block(grid, 0, grid.length());
                st += textLen + bosLen + grid.length() + eosLen;
                videoIdx++;
                remainVideos--;
            } else if (audioInVideo) {
                long audioLen = tokens(preset, sizes.audioFrames, audioIdx);
                var v = sizes.videos.get(videoIdx);
                var grid = FloatVisionBlock.of(videoT3(v, pps), v.h() / 2, v.w() / 2, stIdx);
                int vi = 0;
                long ai = 0;
                while (vi < grid.length() && ai < audioLen) {
                    float audioAt = (float) ai + stIdx;
                    if (grid.t[vi] <= audioAt) { b.block(grid, vi, vi + 1); vi++; }
                    else { b.text(1, audioAt); ai++; }
                }
                if (vi < grid.length()) b.block(grid, vi, grid.length());
                if (ai < audioLen) b.textFrom(ai, audioLen, stIdx);
                st += (int) (textLen + bosLen + audioLen + grid.length() + eosLen);
                audioIdx++;
                videoIdx++;
                remainVideos--;
                remainAudios--;
            } else {
                throw new IllegalArgumentException("a vision start at " + edVisionStart + " is followed by neither an image, a video nor an audio start");
            }
            b.text(eosLen, b.next());
        }
        if (st < n) b.text(n - st, b.next());
        return b.done();
    }

    private static long tokens(AudioPreset preset, List<Long> frames, int idx) {
        if (idx >= frames.size()) throw new IllegalArgumentException("the ids hold more audio runs than the " + frames.size() + " clip(s) given");
        return OmniTokens.audioTokens(preset, frames.get(idx));
    }

    /** Qwen2.5-Omni: {@code (arange(t) · float32(second_per_grid) · 25).long()}, in float32 then truncated. */
    private static long[] videoT(VideoGrid v, int pps) {
        float spg = (float) v.secondPerGrid();
        long[] t = new long[(int) v.t()];
        for (int k = 0; k < t.length; k++) t[k] = (long) (((float) k * spg) * (float) pps);
        return t;
    }

    /** Qwen3-Omni: {@code (arange(t) · float32(second_per_grid) · 13).float()}. */
    private static float[] videoT3(VideoGrid v, float pps) {
        float spg = (float) v.secondPerGrid();
        float[] t = new float[(int) v.t()];
        for (int k = 0; k < t.length; k++) t[k] = ((float) k * spg) * pps;
        return t;
    }

    private static int indexOf(long[] ids, long id, int from) {
        for (int i = from; i < ids.length; i++) if (ids[i] == id) return i;
        throw new IllegalArgumentException("token " + id + " not found from index " + from + " (the ids and media disagree)");
    }

    /** The media of one sample split by kind, audio runs (clips and videos' tracks) in text order. */
    private record Sizes(List<ImageGrid> images, List<VideoGrid> videos, List<Long> audioFrames, boolean audioInVideo) {
        static Sizes of(AudioPreset preset, List<Media> media) {
            boolean aiv = OmniTokens.audioInVideo(preset, media);
            var images = new ArrayList<ImageGrid>();
            var videos = new ArrayList<VideoGrid>();
            var audio = new ArrayList<Long>();
            for (var m : media) {
                switch (m) {
                    case AudioClip a -> audio.add(a.melFrames());
                    case ImageGrid g -> images.add(g);
                    case VideoGrid v -> {
                        videos.add(v);
                        if (v.hasAudio()) audio.add(v.audioMelFrames());
                    }
                }
            }
            return new Sizes(images, videos, audio, aiv);
        }
    }

    /** A (t, h, w) grid's positions from {@code start}, t outermost (get_llm_pos_ids_for_vision). */
    private record VisionBlock(long[] t, long[] h, long[] w) {
        static VisionBlock of(long[] tIndex, long gh, long gw, long start) {
            int len = Math.toIntExact(tIndex.length * gh * gw);
            var t = new long[len];
            var h = new long[len];
            var w = new long[len];
            int i = 0;
            for (long ti : tIndex)
                for (long y = 0; y < gh; y++)
                    for (long x = 0; x < gw; x++) {
                        t[i] = ti + start;
                        h[i] = y + start;
                        w[i] = x + start;
                        i++;
                    }
            return new VisionBlock(t, h, w);
        }

        int length() { return t.length; }
    }

    private record FloatVisionBlock(float[] t, float[] h, float[] w) {
        static FloatVisionBlock of(float[] tIndex, long gh, long gw, float start) {
            int len = Math.toIntExact(tIndex.length * gh * gw);
            var t = new float[len];
            var h = new float[len];
            var w = new float[len];
            int i = 0;
            for (float ti : tIndex)
                for (long y = 0; y < gh; y++)
                    for (long x = 0; x < gw; x++) {
                        t[i] = ti + start;
                        h[i] = (float) y + start;
                        w[i] = (float) x + start;
                        i++;
                    }
            return new FloatVisionBlock(t, h, w);
        }

        int length() { return t.length; }
    }

    /** Three rows filled in order; {@link #next()} is one past the largest value of the last block appended. */
    private static final class LongRows {
        private final long[][] p;
        private int len;
        private long lastMax;
        private boolean any;

        LongRows(int n) { p = new long[3][n]; }

        long next() { return any ? lastMax + 1 : 0; }

        /** {@code count} positions {@code start, start+1, …} on all three rows (a text run, a bos/eos, an audio run). */
        void text(long count, long start) {
            if (len + count > p[0].length) throw new IllegalArgumentException("the media need more tokens than the ids hold");
            for (long j = 0; j < count; j++) {
                p[0][len] = p[1][len] = p[2][len] = start + j;
                len++;
            }
            lastMax = start + count - 1;
            any = true;
        }

        void block(VisionBlock g, int from, int to) {
            if (len + (to - from) > p[0].length) throw new IllegalArgumentException("the media need more tokens than the ids hold");
            long max = Long.MIN_VALUE;
            for (int i = from; i < to; i++) {
                p[0][len] = g.t[i];
                p[1][len] = g.h[i];
                p[2][len] = g.w[i];
                max = Math.max(max, Math.max(g.t[i], Math.max(g.h[i], g.w[i])));
                len++;
            }
            lastMax = max;
            any = true;
        }

        long[][] done() {
            if (len != p[0].length) throw new IllegalArgumentException("positions for " + len + " of " + p[0].length + " tokens: the ids and media disagree");
            return p;
        }
    }

    private static final class FloatRows {
        private final float[][] p;
        private int len;
        private float lastMax;
        private boolean any;

        FloatRows(int n) { p = new float[3][n]; }

        float next() { return any ? lastMax + 1 : 0; }

        void text(long count, float start) { textFrom(0, count, start); }

        /** Positions {@code start + j} for j in [from, to): {@code arange(k) + st_idx} in float32. */
        void textFrom(long from, long to, float start) {
            if (len + (to - from) > p[0].length) throw new IllegalArgumentException("the media need more tokens than the ids hold");
            float max = Float.NEGATIVE_INFINITY;
            for (long j = from; j < to; j++) {
                float v = (float) j + start;
                p[0][len] = p[1][len] = p[2][len] = v;
                max = Math.max(max, v);
                len++;
            }
            lastMax = max;
            any = true;
        }

        void block(FloatVisionBlock g, int from, int to) {
            if (len + (to - from) > p[0].length) throw new IllegalArgumentException("the media need more tokens than the ids hold");
            float max = Float.NEGATIVE_INFINITY;
            for (int i = from; i < to; i++) {
                p[0][len] = g.t[i];
                p[1][len] = g.h[i];
                p[2][len] = g.w[i];
                max = Math.max(max, Math.max(g.t[i], Math.max(g.h[i], g.w[i])));
                len++;
            }
            lastMax = max;
            any = true;
        }

        float[][] done() {
            if (len != p[0].length) throw new IllegalArgumentException("positions for " + len + " of " + p[0].length + " tokens: the ids and media disagree");
            return p;
        }
    }
}
