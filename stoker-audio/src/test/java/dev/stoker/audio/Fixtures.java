package dev.stoker.audio;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The committed fixtures of src/test/resources/dev/stoker/audio, written once by tools/audio-check/make_fixtures.py
 * from transformers 5.18.0's WhisperFeatureExtractor (numpy path): the tests hold its rule with no Python.
 */
final class Fixtures {
    private Fixtures() {}

    static byte[] bytes(String name) throws IOException {
        try (InputStream in = Fixtures.class.getResourceAsStream(name)) {
            if (in == null) throw new IOException("missing test resource dev/stoker/audio/" + name);
            return in.readAllBytes();
        }
    }

    static Npy.Array npy(String name) throws IOException { return Npy.read(bytes(name), name); }

    /** The fixture clip as the script fed it to the extractor: int16 / 32768 in float32. */
    static float[] clip() throws IOException {
        Npy.Array a = npy("clip_pcm.npy");
        if (!a.dtype().equals("<i2")) throw new IOException("clip_pcm.npy is " + a.dtype());
        short[] s = new short[a.data().length / 2];
        ByteBuffer.wrap(a.data()).order(ByteOrder.LITTLE_ENDIAN).asShortBuffer().get(s);
        float[] out = new float[s.length];
        for (int i = 0; i < s.length; i++) out[i] = s[i] / 32768f;
        return out;
    }

    static JsonNode meta() throws IOException { return new ObjectMapper().readTree(bytes("fixtures.json")); }
}
