package io.orbitkv.pd.proxy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class ApiKeysTest {

    private final AtomicLong now = new AtomicLong();

    private ApiKeys keys() {
        return ApiKeys.parse("""
                # name key rate
                team-a  aaaaaaaaaaaaaaaaaaaa  2
                team-b  bbbbbbbbbbbbbbbbbbbb  0.5
                """, "keys.txt", now::get);
    }

    @Test
    void aRequestNeedsOneOfTheKeys() {
        ApiKeys k = keys();
        assertThat(k.check(null)).isInstanceOf(ApiKeys.Verdict.Unauthorized.class);
        assertThat(k.check("Basic abc")).isInstanceOf(ApiKeys.Verdict.Unauthorized.class);
        assertThat(k.check("Bearer cccccccccccccccccccc")).isEqualTo(new ApiKeys.Verdict.Unauthorized("the API key is not valid"));
        assertThat(k.check("bearer aaaaaaaaaaaaaaaaaaaa")).isEqualTo(new ApiKeys.Verdict.Allowed("team-a"));
        assertThat(k.names()).containsExactly("team-a", "team-b");
    }

    @Test
    void eachKeyHasItsOwnRateWithABurstOfOneSecond() {
        ApiKeys k = keys();
        assertThat(k.check("Bearer aaaaaaaaaaaaaaaaaaaa")).isInstanceOf(ApiKeys.Verdict.Allowed.class);
        assertThat(k.check("Bearer aaaaaaaaaaaaaaaaaaaa")).isInstanceOf(ApiKeys.Verdict.Allowed.class);
        assertThat(k.check("Bearer aaaaaaaaaaaaaaaaaaaa")).isEqualTo(new ApiKeys.Verdict.Limited("team-a", 1));
        // team-b's own bucket is untouched: one request, then 2 s to the next
        assertThat(k.check("Bearer bbbbbbbbbbbbbbbbbbbb")).isInstanceOf(ApiKeys.Verdict.Allowed.class);
        assertThat(k.check("Bearer bbbbbbbbbbbbbbbbbbbb")).isEqualTo(new ApiKeys.Verdict.Limited("team-b", 2));
        now.addAndGet(500_000_000L); // half a second: one more for team-a
        assertThat(k.check("Bearer aaaaaaaaaaaaaaaaaaaa")).isInstanceOf(ApiKeys.Verdict.Allowed.class);
        assertThat(k.check("Bearer aaaaaaaaaaaaaaaaaaaa")).isInstanceOf(ApiKeys.Verdict.Limited.class);
    }

    @Test
    void aMalformedFileIsRefusedNamingTheLine() {
        assertThatThrownBy(() -> ApiKeys.parse("a short 1\n", "k", now::get)).hasMessage("proxy.auth.keys-file: k line 1: key of a is shorter than 16 characters");
        assertThatThrownBy(() -> ApiKeys.parse("a aaaaaaaaaaaaaaaaaaaa 0\n", "k", now::get)).hasMessageContaining("line 1: requests per second of a");
        assertThatThrownBy(() -> ApiKeys.parse("a aaaaaaaaaaaaaaaaaaaa 1\nb aaaaaaaaaaaaaaaaaaaa 1\n", "k", now::get))
                .hasMessage("proxy.auth.keys-file: k line 2: the key of b is also a's");
        assertThatThrownBy(() -> ApiKeys.parse("# none\n", "k", now::get)).hasMessage("proxy.auth.keys-file: k holds no key");
        assertThatThrownBy(() -> ApiKeys.parse("a b\n", "k", now::get)).hasMessageContaining("expected '<name> <key> <requests per second>'");
    }
}
