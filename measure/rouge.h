// measure/rouge.h — ROUGE-1, ROUGE-2 and ROUGE-L (precision, recall, F1) computed the way Google's
// rouge-score package computes them with its default tokenizer, so numbers from ./eval can be
// compared with numbers from `rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"],
// use_stemmer=...)`:
//
//   tokenisation   text lower-cased; every run of characters other than a-z and 0-9 is a
//                  separator; with stemming, each token longer than 3 characters is replaced by
//                  its Porter stem (NLTK's PorterStemmer in its default NLTK_EXTENSIONS mode,
//                  which is what rouge-score uses); empty tokens are dropped.
//   ROUGE-N        n-gram counts of both texts, overlap = Σ min(count_ref, count_pred);
//                  P = overlap / max(#pred n-grams, 1), R = overlap / max(#ref n-grams, 1).
//   ROUGE-L        longest common subsequence of the two token lists (not the summary-level
//                  "Lsum"); P = LCS / #pred tokens, R = LCS / #ref tokens; 0 when either is empty.
//   F1             2PR / (P + R), 0 when P + R = 0.
//
// Input is UTF-8 bytes. Python's str.lower() maps exactly two non-ASCII characters onto ASCII
// letters, U+0130 (İ → "i" + combining dot) and U+212A (Kelvin sign → "k"); both are handled, so
// tokens agree with rouge-score on any text. Every other non-ASCII byte is a separator.
#pragma once
#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace rouge {

// ---------------------------------------------------------------------------------------------
// Porter stemmer (M. F. Porter, "An algorithm for suffix stripping", 1980) with the extensions
// NLTK applies by default: a table of irregular forms, words of ≤ 2 letters left alone, "ies"/
// "ied" of 4-letter words kept as "ie", y → i only after a consonant that is not the first
// letter, the "bli"/"alli"/"fulli"/"logi" rules of step 2, and *o true for a 2-letter
// vowel-consonant stem. Expects lower-case a-z/0-9 (digits count as consonants).
class PorterStemmer {
public:
    std::string stem(const std::string& word) const {
        static const std::unordered_map<std::string, std::string> irregular = {
            {"sky", "sky"},       {"skies", "sky"},     {"dying", "die"},       {"lying", "lie"},
            {"tying", "tie"},     {"news", "news"},     {"innings", "inning"},  {"inning", "inning"},
            {"outings", "outing"}, {"outing", "outing"}, {"cannings", "canning"}, {"canning", "canning"},
            {"howe", "howe"},     {"proceed", "proceed"}, {"exceed", "exceed"}, {"succeed", "succeed"}};
        auto it = irregular.find(word);
        if (it != irregular.end()) return it->second;
        if (word.size() <= 2) return word;
        std::string w = step1a(word);
        w = step1b(w);
        w = step1c(w);
        w = step2(w);
        w = step3(w);
        w = step4(w);
        w = step5a(w);
        return step5b(w);
    }

private:
    using Condition = std::function<bool(const std::string& stem)>;
    // Replace `suffix` by `replacement` when the stem left after removing it meets `condition`
    // (none = always).
    struct Rule {
        const char* suffix;
        const char* replacement;
        Condition condition;
    };

    static bool ends_with(const std::string& w, const std::string& suffix) {
        return w.size() >= suffix.size() && w.compare(w.size() - suffix.size(), suffix.size(), suffix) == 0;
    }
    static std::string drop(const std::string& w, size_t n) { return w.substr(0, w.size() - n); }

    // A consonant is a letter other than a, e, i, o, u, and other than a y preceded by a consonant.
    static bool consonant(const std::string& w, size_t i) {
        const char c = w[i];
        if (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u') return false;
        if (c == 'y') return i == 0 ? true : !consonant(w, i - 1);
        return true;
    }
    // m in [C](VC)^m[V]: the number of vowel→consonant transitions.
    static int measure(const std::string& s) {
        int m = 0;
        for (size_t i = 0; i + 1 < s.size(); i++)
            if (!consonant(s, i) && consonant(s, i + 1)) m++;
        return m;
    }
    static bool has_vowel(const std::string& s) {
        for (size_t i = 0; i < s.size(); i++)
            if (!consonant(s, i)) return true;
        return false;
    }
    static bool ends_double_consonant(const std::string& s) {
        const size_t n = s.size();
        return n >= 2 && s[n - 1] == s[n - 2] && consonant(s, n - 1);
    }
    // *o: the stem ends consonant-vowel-consonant, the last not w, x or y; or (NLTK) the whole
    // stem is vowel-consonant.
    static bool ends_cvc(const std::string& s) {
        const size_t n = s.size();
        if (n >= 3 && consonant(s, n - 3) && !consonant(s, n - 2) && consonant(s, n - 1))
            return s[n - 1] != 'w' && s[n - 1] != 'x' && s[n - 1] != 'y';
        return n == 2 && !consonant(s, 0) && consonant(s, 1);
    }
    static bool positive_measure(const std::string& s) { return measure(s) > 0; }

    // The first rule whose suffix the word has decides: applied if its condition holds, else the
    // word is returned unchanged (later rules are not tried).
    static std::string first_rule(const std::string& w, const std::vector<Rule>& rules) {
        for (const Rule& r : rules) {
            if (!ends_with(w, r.suffix)) continue;
            const std::string stem = drop(w, std::char_traits<char>::length(r.suffix));
            if (!r.condition || r.condition(stem)) return stem + r.replacement;
            return w;
        }
        return w;
    }

    // Plurals: sses → ss, ies → i, ss → ss, s → "" (NLTK: a 4-letter "…ies" keeps "ie").
    static std::string step1a(const std::string& w) {
        if (w.size() == 4 && ends_with(w, "ies")) return drop(w, 1);
        return first_rule(w, {{"sses", "ss", nullptr}, {"ies", "i", nullptr}, {"ss", "ss", nullptr}, {"s", "", nullptr}});
    }

    // -eed, -ed, -ing, then the tidying that restores an e or undoubles a consonant.
    static std::string step1b(const std::string& w) {
        if (ends_with(w, "ied")) return drop(w, 3) + (w.size() == 4 ? "ie" : "i");
        if (ends_with(w, "eed")) {
            const std::string stem = drop(w, 3);
            return measure(stem) > 0 ? stem + "ee" : w;
        }
        std::string stem;
        bool removed = false;
        for (const char* suffix : {"ed", "ing"}) {
            if (ends_with(w, suffix)) {
                stem = drop(w, std::char_traits<char>::length(suffix));
                if (has_vowel(stem)) {
                    removed = true;
                    break;
                }
            }
        }
        if (!removed) return w;
        if (ends_with(stem, "at") || ends_with(stem, "bl") || ends_with(stem, "iz")) return stem + "e";
        if (ends_double_consonant(stem)) {
            const char last = stem.back();
            return (last == 'l' || last == 's' || last == 'z') ? stem : drop(stem, 1);
        }
        if (measure(stem) == 1 && ends_cvc(stem)) return stem + "e";
        return stem;
    }

    // y → i after a consonant that is not the word's first letter.
    static std::string step1c(const std::string& w) {
        return first_rule(w, {{"y", "i", [](const std::string& s) { return s.size() > 1 && consonant(s, s.size() - 1); }}});
    }

    // Double suffixes to single ones (m > 0).
    static std::string step2(const std::string& w) {
        if (ends_with(w, "alli") && positive_measure(drop(w, 4))) return step2(drop(w, 4) + "al");
        const Condition m0 = positive_measure;
        return first_rule(w, {{"ational", "ate", m0}, {"tional", "tion", m0}, {"enci", "ence", m0},
                              {"anci", "ance", m0},   {"izer", "ize", m0},    {"bli", "ble", m0},
                              {"alli", "al", m0},     {"entli", "ent", m0},   {"eli", "e", m0},
                              {"ousli", "ous", m0},   {"ization", "ize", m0}, {"ation", "ate", m0},
                              {"ator", "ate", m0},    {"alism", "al", m0},    {"iveness", "ive", m0},
                              {"fulness", "ful", m0}, {"ousness", "ous", m0}, {"aliti", "al", m0},
                              {"iviti", "ive", m0},   {"biliti", "ble", m0},  {"fulli", "ful", m0},
                              // "logi" → "log", the measure taken with the l kept in the stem
                              {"logi", "log", [](const std::string& s) { return positive_measure(s + "l"); }}});
    }

    // -icate, -ative, -alize, -iciti, -ical, -ful, -ness (m > 0).
    static std::string step3(const std::string& w) {
        const Condition m0 = positive_measure;
        return first_rule(w, {{"icate", "ic", m0}, {"ative", "", m0}, {"alize", "al", m0}, {"iciti", "ic", m0},
                              {"ical", "ic", m0},  {"ful", "", m0},   {"ness", "", m0}});
    }

    // Removes -al, -ance, … in context m > 1 (-ion only after s or t).
    static std::string step4(const std::string& w) {
        const Condition m1 = [](const std::string& s) { return measure(s) > 1; };
        const Condition ion = [](const std::string& s) {
            return measure(s) > 1 && !s.empty() && (s.back() == 's' || s.back() == 't');
        };
        return first_rule(w, {{"al", "", m1},   {"ance", "", m1}, {"ence", "", m1}, {"er", "", m1},
                              {"ic", "", m1},   {"able", "", m1}, {"ible", "", m1}, {"ant", "", m1},
                              {"ement", "", m1}, {"ment", "", m1}, {"ent", "", m1},  {"ion", "", ion},
                              {"ou", "", m1},   {"ism", "", m1},  {"ate", "", m1},  {"iti", "", m1},
                              {"ous", "", m1},  {"ive", "", m1},  {"ize", "", m1}});
    }

    // A final e goes when m > 1, or m = 1 and the stem does not end cvc.
    static std::string step5a(const std::string& w) {
        if (!ends_with(w, "e")) return w;
        const std::string stem = drop(w, 1);
        const int m = measure(stem);
        if (m > 1 || (m == 1 && !ends_cvc(stem))) return stem;
        return w;
    }

    // -ll → -l when m > 1.
    static std::string step5b(const std::string& w) {
        if (ends_with(w, "ll") && measure(drop(w, 1)) > 1) return drop(w, 1);
        return w;
    }
};

// ---------------------------------------------------------------------------------------------
// Tokenisation (rouge-score's default tokenizer)

inline std::vector<std::string> tokenize(const std::string& text, bool stem) {
    std::vector<std::string> tokens;
    std::string current;
    auto flush = [&]() {
        if (!current.empty()) tokens.push_back(current);
        current.clear();
    };
    for (size_t i = 0; i < text.size(); i++) {
        const unsigned char c = (unsigned char)text[i];
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            current += (char)c;
        } else if (c >= 'A' && c <= 'Z') {
            current += (char)(c - 'A' + 'a');
        } else if (c == 0xC4 && i + 1 < text.size() && (unsigned char)text[i + 1] == 0xB0) {
            current += 'i';  // U+0130 lowers to "i" + U+0307 (a separator)
            flush();
            i += 1;
        } else if (c == 0xE2 && i + 2 < text.size() && (unsigned char)text[i + 1] == 0x84 &&
                   (unsigned char)text[i + 2] == 0xAA) {
            current += 'k';  // U+212A KELVIN SIGN lowers to "k"
            i += 2;
        } else {
            flush();
        }
    }
    flush();
    if (stem) {
        static const PorterStemmer stemmer;
        for (std::string& t : tokens)
            if (t.size() > 3) t = stemmer.stem(t);
        tokens.erase(std::remove_if(tokens.begin(), tokens.end(), [](const std::string& t) { return t.empty(); }),
                     tokens.end());
    }
    return tokens;
}

// ---------------------------------------------------------------------------------------------
// Scores

struct Score {
    double precision = 0, recall = 0, f1 = 0;
};

inline double f1_of(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

// ROUGE-N of a prediction against a reference, both already tokenised.
inline Score rouge_n(const std::vector<std::string>& reference, const std::vector<std::string>& prediction, int n) {
    auto count = [n](const std::vector<std::string>& t) {
        std::unordered_map<std::string, int> grams;
        for (size_t i = 0; i + n <= t.size(); i++) {
            std::string key = t[i];
            for (int k = 1; k < n; k++) key += ' ' + t[i + k];  // tokens never hold spaces
            grams[key]++;
        }
        return grams;
    };
    const auto ref = count(reference), pred = count(prediction);
    long long overlap = 0, ref_total = 0, pred_total = 0;
    for (const auto& [gram, c] : ref) {
        ref_total += c;
        auto it = pred.find(gram);
        if (it != pred.end()) overlap += std::min(c, it->second);
    }
    for (const auto& kv : pred) pred_total += kv.second;
    Score s;
    s.precision = (double)overlap / std::max(pred_total, 1LL);
    s.recall = (double)overlap / std::max(ref_total, 1LL);
    s.f1 = f1_of(s.precision, s.recall);
    return s;
}

// Length of the longest common subsequence (dynamic programming, two rows).
inline size_t lcs_length(const std::vector<std::string>& a, const std::vector<std::string>& b) {
    std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
    for (size_t i = 1; i <= a.size(); i++) {
        for (size_t j = 1; j <= b.size(); j++)
            cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

// ROUGE-L of a prediction against a reference, both already tokenised.
inline Score rouge_l(const std::vector<std::string>& reference, const std::vector<std::string>& prediction) {
    Score s;
    if (reference.empty() || prediction.empty()) return s;
    const double lcs = (double)lcs_length(reference, prediction);
    s.precision = lcs / prediction.size();
    s.recall = lcs / reference.size();
    s.f1 = f1_of(s.precision, s.recall);
    return s;
}

struct Scores {
    Score rouge1, rouge2, rougeL;
};

// All three scores of a prediction text against a reference text.
inline Scores score(const std::string& reference, const std::string& prediction, bool stem) {
    const std::vector<std::string> ref = tokenize(reference, stem), pred = tokenize(prediction, stem);
    return {rouge_n(ref, pred, 1), rouge_n(ref, pred, 2), rouge_l(ref, pred)};
}

}  // namespace rouge
