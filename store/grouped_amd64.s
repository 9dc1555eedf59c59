#include "textflag.h"

// func splitSSE2(data, even, odd *byte, blocks int)
// Each block: 32 bytes of data to 16 even and 16 odd bytes.
TEXT ·splitSSE2(SB), NOSPLIT, $0-32
	MOVQ data+0(FP), SI
	MOVQ even+8(FP), DI
	MOVQ odd+16(FP), DX
	MOVQ blocks+24(FP), CX
	PCMPEQW X7, X7
	PSRLW $8, X7          // 0x00ff in every 16-bit lane
split:
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	MOVO X0, X2
	MOVO X1, X3
	PAND X7, X0           // the even bytes, one per lane
	PAND X7, X1
	PACKUSWB X1, X0       // X0: the 16 even bytes
	PSRLW $8, X2          // the odd bytes, one per lane
	PSRLW $8, X3
	PACKUSWB X3, X2       // X2: the 16 odd bytes
	MOVOU X0, (DI)
	MOVOU X2, (DX)
	ADDQ $32, SI
	ADDQ $16, DI
	ADDQ $16, DX
	DECQ CX
	JNZ split
	RET

// func interleaveSSE2(dst, even, odd *byte, blocks int)
// Each block: 16 even and 16 odd bytes to 32 bytes of dst.
TEXT ·interleaveSSE2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ even+8(FP), SI
	MOVQ odd+16(FP), DX
	MOVQ blocks+24(FP), CX
interleave:
	MOVOU (SI), X0
	MOVOU (DX), X1
	MOVO X0, X2
	PUNPCKLBW X1, X0      // even 0-7 with odd 0-7
	PUNPCKHBW X1, X2      // even 8-15 with odd 8-15
	MOVOU X0, (DI)
	MOVOU X2, 16(DI)
	ADDQ $16, SI
	ADDQ $16, DX
	ADDQ $32, DI
	DECQ CX
	JNZ interleave
	RET
