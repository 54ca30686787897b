/*
 * Multiboot entry and interrupt stub of the nvme-dataplane KVM test guest.
 *
 * KVM's instruction emulator (which runs every instruction of a guest on
 * a host without hardware virtualisation) cannot execute iret in protected
 * mode, so the interrupt stub returns with popfl; ret instead.
 */
	.section .multiboot, "a"
	.align 4
	.long 0x1badb002		/* magic */
	.long 0				/* flags: ELF, no modules, no video */
	.long -0x1badb002		/* checksum */

	.text
	.globl _start
_start:
	cli
	mov %eax, %edi			/* multiboot magic */
	mov %ebx, %esi			/* multiboot info */
	lgdt gdt_desc
	ljmp $0x08, $1f
1:	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov %ax, %fs
	mov %ax, %gs
	mov $stack_top, %esp
	push %esi
	push %edi
	call guest_main
2:	cli
	hlt
	jmp 2b

	.globl irq_stub
irq_stub:
	pusha
	cld
	call irq_handler
	popa
	/* stack: eip, cs, eflags -> eip, eflags, eip; then popfl; ret */
	push %eax
	mov 12(%esp), %eax
	mov %eax, 8(%esp)
	mov 4(%esp), %eax
	mov %eax, 12(%esp)
	pop %eax
	add $4, %esp
	popfl
	ret

	.section .rodata
	.align 8
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff	/* 0x08: flat 32-bit code */
	.quad 0x00cf92000000ffff	/* 0x10: flat data */
gdt_desc:
	.word gdt_desc - gdt - 1
	.long gdt

	.bss
	.align 16
	.space 16384
stack_top:

	.section .note.GNU-stack, "", @progbits
