"""The SASS opcode counter (experiments/evaluation/sass_count.py) on a listing as cuobjdump
prints it: predicated instructions count, modifiers and operands do not split an opcode,
headers and encodings are not instructions. (Compiling a config to count it is the slow
sm90 path: BENCHMARKS.md, part F's second step.)"""

from flashtune.experiments.evaluation.sass_count import opcode_counts

LISTING = """
        Function : gluon_attention_kernel
        .headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0960*/                   SHFL.BFLY PT, R2, R5, 0x2, 0x1f ;                 /* 0x0c401f0005027f89 */
                                                                                     /* 0x000e2800000e0000 */
        /*0970*/              @!P0 FMUL.FTZ R3, R4, 448 ;                            /* 0x43e0000004038820 */
        /*0980*/               @P1 FMUL R3, R3, R3 ;                                 /* 0x0000000303031220 */
        /*1f10*/                   F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R3, R4, R3, RZ ;  /* 0x000000030403723e */
        /*1f90*/                   PRMT R3, R3, 0x5410, R182 ;                       /* 0x0000541003037816 */
        /*2000*/             @!UP0 MUFU.EX2 R5, R6 ;                                 /* 0x0000000600057308 */
"""


def test_counts_each_instruction_once_by_its_opcode():
    assert opcode_counts(LISTING) == {"SHFL": 1, "FMUL": 2, "F2FP": 1, "PRMT": 1, "MUFU": 1}


def test_extra_constexprs_parse_as_name_and_value_and_a_bad_one_is_named():
    import argparse

    import pytest

    from flashtune.experiments.evaluation.sass_count import _constexpr

    assert _constexpr("ROWSUM_MMA=true") == ("ROWSUM_MMA", True)
    assert _constexpr("EXP2_POLY=3") == ("EXP2_POLY", 3)
    for bad in ("ROWSUM_MMA", "=1", "EXP2_POLY=three"):
        with pytest.raises(argparse.ArgumentTypeError, match="--extra"):
            _constexpr(bad)
