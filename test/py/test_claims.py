"""The claims table: README.md's table and docs/claims.md are what `sweep.py --claims` writes from
the published tables under docs/; the number formats of its prose. Run by build/test_experiments."""
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_claims.py")

from experiments import claim_rows, claims, tables  # noqa: E402


class Tests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lines = claims.claims_table(os.path.join(REPO, "docs"))

    def test_readme_table_is_the_generated_one(self):
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertEqual(readme, claims.readme_with_table(readme, self.lines),
                         "README.md's claims table differs from what `python3 sweep.py --claims` writes: run it")

    def test_docs_claims_is_the_generated_one(self):
        with open(os.path.join(REPO, "docs", "claims.md"), encoding="utf-8") as f:
            self.assertEqual(f.read(), claims.claims_markdown(self.lines),
                             "docs/claims.md differs from what `python3 sweep.py --claims` writes: run it")

    def test_one_row_per_claim(self):
        self.assertEqual(len(self.lines), 2 + len(claim_rows.CLAIMS))
        for i, line in enumerate(self.lines[2:], 1):
            self.assertTrue(line.startswith(f"| {i}. "), line)
            self.assertEqual(line.count(" | "), 3, line)  # four cells: no stray | in the prose

    def test_markers(self):
        self.assertEqual(claims.readme_with_table("a\n<!-- claims:begin -->\nold\n<!-- claims:end -->\nb", ["x"]),
                         "a\n<!-- claims:begin -->\nx\n<!-- claims:end -->\nb")
        for broken in ("no markers", "<!-- claims:end --> <!-- claims:begin -->"):
            with self.assertRaises(ValueError):
                claims.readme_with_table(broken, ["x"])

    def test_number_formats(self):
        self.assertEqual([tables.two_digits(x) for x in (4.55731, 16.14972, 178.29, 0.022629, 11.7)],
                         ["4.6", "16", "178", "0.023", "12"])
        self.assertEqual(tables.two_digits(1.9629, like=4.557), "2.0")
        self.assertEqual(tables.two_digits(5.92, like=16.1), "6")
        self.assertEqual([tables.p_value(p) for p in (0.0479, 0.12, 0.0047, 0.00053, 3.1e-11)],
                         ["0.048", "0.12", "0.005", "5e-4", "3e-11"])
        self.assertEqual([tables.decimals2(x) for x in (0.6727, 1.70397, 1.118)], ["0.67", "1.7", "1.12"])
        self.assertEqual(tables.minus(-0.38), "−0.38")


if __name__ == "__main__":
    unittest.main()
