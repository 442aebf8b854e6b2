package dev.stoker.video.decode;

import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.index.FrameIndex;

/**
 * What decodes a video's sampled frames: {@link #IN_PROCESS} ({@link VideoDecoder}, in the calling thread: fastest, but a
 * crash in libavcodec ends the process) or {@link dev.stoker.video.isolate.IsolatedDecoder} (a worker process per decode:
 * a crash fails that video only). Both give the same frames.
 */
@FunctionalInterface
public interface FrameDecoder {
    /** Decodes in the calling thread. */
    FrameDecoder IN_PROCESS = VideoDecoder::decode;

    /** As {@link VideoDecoder#decode(SeekableByteSource, FrameIndex, int[], long, VideoDecoder.FrameSink)}. */
    VideoDecoder.Result decode(SeekableByteSource source, FrameIndex index, int[] frames, long deadlineNanos,
                               VideoDecoder.FrameSink sink);
}
