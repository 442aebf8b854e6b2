package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Credentials put where they would be shown (an endpoint URL on the command line) are refused without being echoed. */
@Timeout(60)
class S3CredentialsCliTest {
    @TempDir Path tmp;

    @Test
    void anEndpointWithCredentialsIsInvalidInputAndNotEchoed() {
        var r = CliRunner.run("serve", "--data", "s3://bucket/ds/train.jsonl", "--socket", tmp.resolve("s.sock").toString(),
                "--s3-endpoint", "http://minio:cli-secret-42@127.0.0.1:9");
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("must not carry credentials"), r.err());
        assertFalse((r.out() + r.err()).contains("cli-secret-42"), r.out() + r.err());
    }
}
