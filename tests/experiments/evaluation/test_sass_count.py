"""The SASS opcode counter (docs/lab/tools/sass_count.py) on a listing as cuobjdump
prints it: predicated instructions count, modifiers and operands do not split an opcode,
headers and encodings are not instructions. (Compiling a config to count it is the slow
sm90 path: BENCHMARKS.md, part F's second step.)"""

from sass_count import opcode_counts

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
    from sass_count import _constexpr

    assert _constexpr("LAZY_RESCALE=true") == ("LAZY_RESCALE", True)
    assert _constexpr("EXP2_POLY=3") == ("EXP2_POLY", 3)
    for bad in ("LAZY_RESCALE", "=1", "EXP2_POLY=three"):
        with pytest.raises(argparse.ArgumentTypeError, match="--extra"):
            _constexpr(bad)


#: A block loop as cuobjdump prints it (cut to what the schedule reads): the QK^T and PV groups
#: closed, the QK^T wait, the K release, the PV wait, then the exponentials; the branch back.
LOOP = """
        /*1000*/                   BAR.SYNC.DEFER_BLOCKING 0x2, 0x80 ;
        /*1010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR28], R24, gsb0 ;
        /*1020*/                   HGMMA.64x128x16.F32.BF16 R88, R180, gdesc[UR12].tnspB, R88, gsb0 ;
        /*1030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*1040*/              @!P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR5+0x28100], RZ ;
        /*1050*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
""" + "".join(f"        /*{0x1060 + 16 * i:04x}*/                   MUFU.EX2 R{i}, R{i} ;\n" for i in range(16)) + """
        /*1160*/               @P1 BRA 0x1000 ;
"""


def test_the_block_loop_schedule_places_the_waits_against_the_exponentials():
    from sass_count import block_loop_schedule, pv_wait_follows_the_exponentials

    events = block_loop_schedule(LOOP)
    assert [what.split()[0] for _, what in events] == [
        "BAR.SYNC.DEFER_BLOCKING", "HGMMA.64x128x16.F32.BF16", "HGMMA.64x128x16.F32.BF16", "WARPGROUP.DEPBAR.LE",
        "SYNCS.ARRIVE.TRANS64.A1T0", "WARPGROUP.DEPBAR.LE", "first", "last"]
    assert events[-2] == (6, "first MUFU (of 16)") and events[-1] == (21, "last MUFU")
    assert not pv_wait_follows_the_exponentials(LOOP)
    # The wait moved below the exponentials: it follows them.
    lines = LOOP.splitlines()
    wait = next(i for i, line in enumerate(lines) if "DEPBAR.LE gsb0, 0x0" in line)
    moved = "\n".join(lines[:wait] + lines[wait + 1:-2] + [lines[wait].replace("1050", "1150")] + lines[-2:])
    assert pv_wait_follows_the_exponentials(moved)
    assert block_loop_schedule("no loop here") == []
